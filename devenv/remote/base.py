"""The connection interface every service uses; SSH and local connections implement it."""

from __future__ import annotations

import shlex
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

DEFAULT_TIMEOUT = 60.0


@dataclass(frozen=True)
class Result:
    command: str
    stdout: str
    stderr: str
    exit_code: int
    # seconds from starting the command until its shell ran the first line (one round trip plus the remote
    # shell's start-up, ~/.bashrc included); None where the connection cannot tell
    startup_s: float | None = field(default=None, compare=False)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


@runtime_checkable
class Connection(Protocol):
    """A host we can run commands on. Opens lazily, is a context manager, closes twice safely."""

    name: str  # the host's profile name, for messages

    def run(
        self,
        command: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        check: bool = False,
        stdin: bytes | str | None = None,
        env: dict[str, str] | None = None,
    ) -> Result:
        """Run a shell command; raise CommandTimeout past timeout, CommandFailed if check and non-zero."""
        ...

    def stream(self, command: str, *, timeout: float | None = None) -> Generator[str, None, None]:
        """Run a long-lived command and yield its stdout lines as they come (one channel, one process); closing
        the generator early ends the remote command."""
        ...

    def put(self, data: bytes, remote_path: str, mode: int = 0o644) -> None:
        """Write bytes to a file on the host (no secret ever travels on a command line)."""
        ...

    def close(self) -> None: ...

    def __enter__(self) -> Connection: ...

    def __exit__(self, *exc: object) -> None: ...


class CommandPipe(Protocol):
    """A command on a host as a byte pipe, stdin written and stdout read in chunks (remote.pipe: SSH, local)."""

    command: str

    def read(self, size: int) -> bytes:
        """Up to size bytes of stdout as they come; b"" once stdout ended (the command exited or died)."""
        ...

    def write(self, data: bytes) -> None:
        """All of data to stdin; OSError when the command stopped reading (it exited, or the link died)."""
        ...

    def finish(self, timeout: float) -> Result:
        """Close stdin, wait for the exit (stdout not yet read is the Result's): the exit code (-1: killed or lost)."""
        ...

    def abort(self) -> None:
        """Kill the command (its whole process group) and close; safe after finish and twice."""
        ...


def quote(arg: str) -> str:
    return shlex.quote(arg)
