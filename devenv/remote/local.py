"""LocalConnection: the Connection protocol on this machine (the bundled `local` host), via `bash -c`.

Same semantics as SSHConnection: Result, timeouts that kill the whole process group, stream() whose closing
kills the command, a command is over when its output ends (or 2 s after it exits, if a background child
keeps the pipes open), atomic put() with a mode. env is passed as the process environment (not readable by
other users), on top of ours.
"""

from __future__ import annotations

import os
import selectors
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from devenv.errors import CommandFailed, CommandTimeout, DevenvError
from devenv.remote.base import DEFAULT_TIMEOUT, Result

if TYPE_CHECKING:
    from devenv.remote.pipe import LocalPipe

_QUIET_AFTER_EXIT = 2.0
TERM_GRACE_S = 2.0  # a killed command's process group has this long after TERM, then KILL


class LocalConnection:
    def __init__(self, name: str = "local"):
        self.name = name

    def run(self, command: str, *, timeout: float = DEFAULT_TIMEOUT, check: bool = False,
            stdin: bytes | str | None = None, env: dict[str, str] | None = None) -> Result:
        data = stdin.encode() if isinstance(stdin, str) else stdin
        out, err = bytearray(), bytearray()
        with _Process(command, env, data) as proc:
            for is_err, chunk in proc.output(time.monotonic() + timeout):
                (err if is_err else out).extend(chunk)
            if proc.timed_out:
                raise CommandTimeout(command, timeout, self.name)
        result = Result(command, out.decode(errors="replace"), err.decode(errors="replace"), proc.exit_code)
        if check and not result.ok:
            raise CommandFailed(result)
        return result

    def stream(self, command: str, *, timeout: float | None = None) -> Generator[str, None, None]:
        """Yield stdout lines; closing the generator kills the command; a non-zero end raises CommandFailed."""
        out, err = b"", b""
        with _Process(command, None, None) as proc:
            for is_err, chunk in proc.output(time.monotonic() + timeout if timeout else None):
                if is_err:
                    err = (err + chunk)[-65536:]
                else:
                    *lines, out = (out + chunk).split(b"\n")
                    yield from (line.decode(errors="replace") for line in lines)
            if proc.timed_out:  # only with a deadline, so with a timeout
                raise CommandTimeout(command, timeout or 0.0, self.name)
            if out:
                yield out.decode(errors="replace")
        if proc.exit_code != 0:
            raise CommandFailed(Result(command, "", err.decode(errors="replace"), proc.exit_code))

    def open_pipe(self, command: str) -> LocalPipe:
        """command started, its stdin and stdout a byte pipe (remote.pipe); abort() kills its group."""
        from devenv.remote.pipe import LocalPipe

        return LocalPipe(command, _kill_group)

    def put(self, data: bytes, remote_path: str, mode: int = 0o644) -> None:
        path = Path(remote_path).expanduser()
        try:
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.devenv-")  # 0600 from the start
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        except OSError as e:
            raise DevenvError(f"cannot write {path}: {e.strerror or e}",
                              "check that the directory exists and is writable") from None

    def open_port(self, host: str, port: int, timeout: float) -> socket.socket:
        """A TCP connection to host:port on this machine (what SSHConnection.open_port is over SSH)."""
        return socket.create_connection((host, port), timeout=timeout)

    def close(self) -> None:
        pass

    def __enter__(self) -> LocalConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def __repr__(self) -> str:
        return f"<LocalConnection {self.name}>"


class _Process:
    """One `bash -c` in its own session (so its whole process group can be killed), read through a selector."""

    def __init__(self, command: str, env: dict[str, str] | None, data: bytes | None):
        self.proc = subprocess.Popen(
            ["bash", "-c", command], stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, **(env or {})},
            start_new_session=True)
        if data is not None:
            threading.Thread(target=self._feed, args=(data,), name="devenv-stdin", daemon=True).start()
        self.timed_out = False
        self.finished = False
        self._exit_time: float | None = None

    def _feed(self, data: bytes) -> None:
        assert self.proc.stdin is not None  # a PIPE when there is data
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.close()
        except (BrokenPipeError, ValueError, OSError):
            pass  # the command did not read it all

    def output(self, deadline: float | None) -> Iterator[tuple[bool, bytes]]:
        """(is_stderr, chunk) until the output ends; sets timed_out instead of passing the deadline."""
        assert self.proc.stdout is not None and self.proc.stderr is not None  # both PIPEs
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        sel.register(self.proc.stderr, selectors.EVENT_READ)
        last_output = time.monotonic()
        try:
            while sel.get_map():
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    self.timed_out = True
                    return
                exited_at = self._exited_at()
                if exited_at is not None and now - max(exited_at, last_output) > _QUIET_AFTER_EXIT:
                    break  # a background child holds the pipes; the command itself is done
                for key, _ in sel.select(min(0.2, deadline - now) if deadline is not None else 0.2):
                    chunk = os.read(key.fd, 65536)
                    if not chunk:
                        sel.unregister(key.fileobj)
                        continue
                    last_output = time.monotonic()
                    yield key.fileobj is self.proc.stderr, chunk
            self.proc.wait()
            self.finished = True
        finally:
            sel.close()

    def _exited_at(self) -> float | None:
        if self._exit_time is None and self.proc.poll() is not None:
            self._exit_time = time.monotonic()
        return self._exit_time

    @property
    def exit_code(self) -> int:
        return self.proc.returncode

    def __enter__(self) -> _Process:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.finished:  # timeout, closed stream, Ctrl-C: the command must not outlive us
            _kill_group(self.proc)
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe:
                try:
                    pipe.close()
                except OSError:
                    pass


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """TERM the whole process group, give it TERM_GRACE_S, then KILL what is left; reap the child."""
    _signal_group(proc.pid, signal.SIGTERM)
    deadline, pause = time.monotonic() + TERM_GRACE_S, 0.005
    while time.monotonic() < deadline:
        proc.poll()  # reap the leader so only live members keep the group alive
        if not _group_alive(proc.pid):
            break
        time.sleep(pause)  # most groups go within milliseconds of the TERM
        pause = min(pause * 2, 0.05)
    else:
        _signal_group(proc.pid, signal.SIGKILL)
    proc.wait()


def _group_alive(pgid: int) -> bool:
    """Whether the group has a member that is not a zombie. A member whose parent died first (the shell's
    `sleep`, TERMed with it) is reparented to init and stays a zombie until init reaps it: some inits (a
    container's, this kind of sandbox's) do that seconds later, and the group answers signals until then,
    though nothing in it runs. Without /proc (macOS) the signal's answer is all there is."""
    if not _signal_group(pgid, 0):
        return False
    try:
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return True
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # gone meanwhile
        # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses, so split after its last ')'
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False


def _signal_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False
