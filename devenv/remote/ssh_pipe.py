"""A command on a host run by the user's OpenSSH as a byte pipe (L1): `image push`'s two ends.

The bytes of a stream never pass through Python: the source's `ssh` writes into a kernel pipe, this process
moves them into the destination's `ssh` stdin pipe with splice(2) (page references, no copy to user space),
counting them for the progress line. Only this process holds the write end of the destination's stdin, so its
`load` sees the end of its input only when `close_input` is called: a cut stream is aborted first (the
command's process group killed on the host through devenv's own connection, as remote.pipe's abort does) and
never loaded. `ssh` runs in a session of its own, so a Ctrl-C at the terminal reaches devenv, not the clients
(a client killed first would hand `load` a clean end of a half archive).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import shutil
import subprocess
import threading
from collections.abc import Callable

from devenv.remote.base import Result
from devenv.remote.command_script import PGID_TAG, stop_script, wrap_command

PIPE_BYTES = 1 << 20            # each kernel pipe's size (Linux's default cap for a user: pipe-max-size)
SPLICE_BYTES = 1 << 20
_F_SETPIPE_SZ = 1031
_POLL_MS = 500


def client_argv(options: list[str], conn: object) -> list[str] | None:
    """`ssh` and its options for a pipe to the host (options: remote.openssh.host_options, ending in `--` and
    the destination), with the keepalive devenv's own connection uses; None where no `ssh` is installed."""
    found = shutil.which("ssh")
    if not found:
        return None
    return [found, "-T", "-o", "BatchMode=yes", *keepalive_options(conn), *options]


def keepalive_options(conn: object) -> list[str]:
    """`-o ServerAliveInterval/CountMax` as devenv's own connection to the host uses them (the user's ssh config
    for the host, or devenv's default): the user's ssh then notices a frozen connection as soon as devenv would."""
    resolved = getattr(conn, "resolved", None)
    interval = getattr(resolved, "server_alive_interval", None)
    count = getattr(resolved, "server_alive_count_max", None)
    if not isinstance(interval, (int, float)) or not isinstance(count, int) or not 0 < interval < 86400:
        return []
    return ["-o", f"ServerAliveInterval={max(1, int(interval))}", "-o", f"ServerAliveCountMax={max(1, count)}"]


class NoStart(OSError):
    """ssh could not start the command (login refused, host unreachable): the caller may use another way."""


class OpenSSHPipe:
    """`ssh OPTIONS -- DEST 'command'` with stdin (when `writes`) and stdout as pipes here; stderr collected."""

    def __init__(self, ssh_argv: list[str], command: str, stop: Callable[[str], object], *, writes: bool,
                 gated: bool = False):
        """writes: stdin is the stream (else stdout is, and is not read here). gated: the command waits for
        `go()` (a line on its stdin) and exits quietly on `dismiss()`: ssh logs in while devenv asks its
        questions, and nothing starts that is not wanted."""
        self.command = command
        self._stop = stop
        script = f'IFS= read -r go && [ "$go" = go ] || exit 0\n{command}' if gated else command
        self._proc = subprocess.Popen([*ssh_argv, wrap_command(script, None)],
                                      stdin=subprocess.PIPE if writes or gated else subprocess.DEVNULL,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        assert self._proc.stdout is not None and self._proc.stderr is not None
        for pipe in (self._proc.stdin, self._proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    fcntl.fcntl(pipe.fileno(), _F_SETPIPE_SZ, PIPE_BYTES)
        self.pgid: int | None = None
        self._tagged = threading.Event()
        self._stderr = bytearray()
        self._stdout = bytearray()
        self._closed = False
        self._readers = [threading.Thread(target=self._read_stderr, name="devenv-sshpipe-err", daemon=True)]
        if writes:   # the load's few lines of stdout; the save's stdout is the stream itself
            self._readers.append(threading.Thread(target=self._read_stdout, name="devenv-sshpipe-out", daemon=True))
        for reader in self._readers:
            reader.start()

    @property
    def stdout_fd(self) -> int:
        assert self._proc.stdout is not None
        return self._proc.stdout.fileno()

    @property
    def stdin_fd(self) -> int:
        assert self._proc.stdin is not None
        return self._proc.stdin.fileno()

    def started(self, timeout: float) -> None:
        """Wait until the command runs on the host (its process group is known); NoStart when ssh gave up."""
        if not self._tagged.wait(timeout) or self.pgid is None:
            self.abort()
            raise NoStart(f"ssh could not start the command: {self.stderr_text().strip()[-300:] or 'no answer'}")

    def _read_stderr(self) -> None:
        assert self._proc.stderr is not None
        fd = self._proc.stderr.fileno()
        head = bytearray()
        for chunk in iter(lambda: os.read(fd, 65536), b""):
            if self._tagged.is_set():
                self._stderr += chunk
                continue
            head += chunk
            while b"\n" in head and not self._tagged.is_set():
                line, _, rest = bytes(head).partition(b"\n")
                head = bytearray(rest)
                if line.startswith(PGID_TAG) and line[len(PGID_TAG):].isdigit():
                    self.pgid = int(line[len(PGID_TAG):])
                    self._tagged.set()
                    self._stderr += head
                else:
                    self._stderr += line + b"\n"   # ssh's own words before the command ran (a login banner)
        self._stderr += head
        self._tagged.set()   # ssh ended: no tag will come

    def _read_stdout(self) -> None:
        assert self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        for chunk in iter(lambda: os.read(fd, 65536), b""):
            self._stdout += chunk

    def go(self, *, then_close: bool) -> None:
        """Let a gated command start (bash's `read` takes the line byte by byte: the stream after it is untouched)."""
        try:
            os.write(self.stdin_fd, b"go\n")
        except OSError:
            pass   # ssh is gone: started() or the stream says how
        if then_close:
            self.close_input()

    def dismiss(self, timeout: float = 10) -> None:
        """A gated command not wanted after all: its stdin ends before `go`, it exits 0; killed if it lingers."""
        self.close_input()
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.abort()
        self._closed = True

    def close_input(self) -> None:
        """The end of the command's stdin (a whole stream: `load` may now take it)."""
        if self._proc.stdin is not None:
            with contextlib.suppress(OSError):
                self._proc.stdin.close()

    def finish(self, timeout: float) -> Result:
        """Close stdin, wait for ssh to exit: the command's exit code, -1 when it was killed or the link lost."""
        self.close_input()
        try:
            code = self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.abort()
            code = -1
        for reader in self._readers:
            reader.join(timeout=5)
        self._closed = True
        if code == 255:   # ssh's own failure (or a command killed by a signal): no exit status of the command
            code = -1
        return Result(self.command, self._stdout.decode(errors="replace"), self.stderr_text(), code)

    def abort(self) -> None:
        """Kill the command's process group on the host (devenv's own connection) before its ssh ends, so that
        a `load` never reads the end of a half stream; then the local ssh."""
        if self._closed:
            return
        self._closed = True
        if self.pgid is not None and self._proc.poll() is None:
            with contextlib.suppress(Exception):   # the connection is gone: the host ends the session with it
                self._stop(stop_script(self.pgid))
        if self._proc.poll() is None:
            self._proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(10)

    def stderr_text(self) -> str:
        return self._stderr.decode(errors="replace")


def splice_step(src: int, dst: int) -> int:
    """Move what src (a pipe) holds into dst (a pipe), up to SPLICE_BYTES: bytes moved, 0 at src's end, -1 when
    nothing came within half a second (the caller may look at a cancel). OSError when dst's reader is gone."""
    poller = select.poll()
    poller.register(src, select.POLLIN | select.POLLHUP)
    if not poller.poll(_POLL_MS):
        return -1
    return os.splice(src, dst, SPLICE_BYTES)

