"""A Connection into a running environment container, over a runtime the caller opened (L2: no docker here).

Lets services that speak the Connection protocol (the sanity runner) run inside the environment, with its
python and its torch, exactly as they run on a bare host. Commands run through the runtime's exec.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator
from typing import Protocol

from devenv.errors import CommandFailed, CommandTimeout, DevenvError
from devenv.remote.base import DEFAULT_TIMEOUT, Result


class ExecRuntime(Protocol):
    """What a ContainerConnection uses of its runtime (DockerRuntime has it)."""

    def exec(self, container: str, argv: list[str]) -> tuple[int, str, str]: ...

    def exec_stream(self, container: str, argv: list[str], tty: bool = False, user: str = ""
                    ) -> tuple[Iterator[tuple[bytes | None, bytes | None]], Callable[[], int]]: ...

    def put_files(self, container: str, files: list[tuple[str, bytes, int]]) -> None: ...


class ContainerConnection:
    def __init__(self, runtime: ExecRuntime, container: str, name: str):
        self.runtime = runtime
        self.container = container
        self.name = name

    def run(self, command: str, *, timeout: float = DEFAULT_TIMEOUT, check: bool = False,
            stdin: bytes | str | None = None, env: dict[str, str] | None = None) -> Result:
        if stdin is not None or env:
            raise DevenvError("internal: commands in an environment take no stdin or env here",
                              "use put() to hand data to the environment")
        code, out, err = self.runtime.exec(self.container, ["bash", "-c", command])
        result = Result(command, out, err, code)
        if check and not result.ok:
            raise CommandFailed(result)
        return result

    def stream(self, command: str, *, timeout: float | None = None) -> Generator[str, None, None]:
        """Yield stdout lines; a non-zero end raises CommandFailed with the end of stderr."""
        chunks, exit_code = self.runtime.exec_stream(self.container, ["bash", "-c", command])
        deadline = time.monotonic() + timeout if timeout else None
        pending, err = b"", b""
        for out, errc in chunks:
            if errc:
                err = (err + errc)[-65536:]
            if out:
                *lines, pending = (pending + out).split(b"\n")
                yield from (line.decode(errors="replace") for line in lines)
            if deadline and time.monotonic() > deadline:  # only with a timeout
                raise CommandTimeout(command, timeout or 0.0, self.name)
        if pending:
            yield pending.decode(errors="replace")
        code = exit_code()
        if code != 0:
            raise CommandFailed(Result(command, "", err.decode(errors="replace"), code))

    def put(self, data: bytes, remote_path: str, mode: int = 0o644) -> None:
        self.runtime.put_files(self.container, [(remote_path, data, mode)])

    def close(self) -> None:
        pass

    def __enter__(self) -> ContainerConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        pass
