"""A command on a host as a byte pipe (L1): its stdin written and its stdout read in chunks, as they go.

`image push` streams one engine's `save` into another's `load` through this machine: two pipes, one chunk at a
time, never the whole image in memory or on disk. Either end can be aborted: its process group on the host is
killed (as a timed-out command's is), so a cut stream never leaves a `load` waiting for the rest.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable

from devenv.remote.base import CommandPipe, Result
from devenv.remote.channel_io import ChannelIO
from devenv.remote.sshlib import paramiko

_WAIT_STEP_S = 0.5
__all__ = ["CommandPipe", "LocalPipe", "SSHPipe"]


class SSHPipe:
    """One exec channel of an SSH connection. `stop` kills the command's process group (SSHConnection._stop)."""

    def __init__(self, io: ChannelIO, command: str, stop: Callable[[ChannelIO], None]):
        self.command, self._io, self._stop = command, io, stop
        self._closed = False

    def read(self, size: int) -> bytes:
        ch = self._io.channel
        ch.settimeout(_WAIT_STEP_S)
        while True:
            self._take_stderr()
            try:
                return ch.recv(size)  # b"" once the channel has no more stdout
            except TimeoutError:
                continue  # stderr may be waiting (a command that only complains); look again

    def write(self, data: bytes) -> None:
        self._take_stderr()
        try:
            self._io.channel.sendall(data)
        except (paramiko.SSHException, EOFError, OSError) as e:
            raise OSError(f"the command stopped reading: {e}") from None

    def finish(self, timeout: float) -> Result:
        io = self._io
        try:
            io.channel.shutdown_write()
        except (paramiko.SSHException, EOFError, OSError):
            pass  # already gone: the exit status (or its absence) says how
        waited = 0.0
        while not io.finished() and waited < timeout:
            io.wait(_WAIT_STEP_S)
            waited += _WAIT_STEP_S
            io.drain()
        io.drain()
        if not io.finished():
            self.abort()
        result = Result(self.command, io.stdout.decode(errors="replace"), io.stderr_text(), io.exit_code())
        self._close()
        return result

    def abort(self) -> None:
        if self._closed:
            return
        try:
            self._stop(self._io)
        except (paramiko.SSHException, EOFError, OSError):
            pass  # the connection is gone: sshd ends the command with it
        self._close()

    def stderr_text(self) -> str:
        self._take_stderr()
        return self._io.stderr_text()

    def _take_stderr(self) -> None:
        ch = self._io.channel
        while ch.recv_stderr_ready():
            self._io._feed_stderr(ch.recv_stderr(65536))

    def _close(self) -> None:
        self._closed = True
        try:
            self._io.channel.close()
        except (paramiko.SSHException, EOFError, OSError):
            pass


class LocalPipe:
    """A `bash -c` on this machine in its own session (a `local: true` host)."""

    def __init__(self, command: str, kill_group: Callable[[subprocess.Popen[bytes]], None]):
        self.command = command
        self._kill_group = kill_group
        self._proc = subprocess.Popen(["bash", "-c", command], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, start_new_session=True)
        self._stderr = bytearray()
        self._err_reader = threading.Thread(target=self._read_stderr, name="devenv-pipe-stderr", daemon=True)
        self._err_reader.start()
        self._closed = False

    def _read_stderr(self) -> None:
        assert self._proc.stderr is not None
        fd = self._proc.stderr.fileno()
        for chunk in iter(lambda: os.read(fd, 65536), b""):
            self._stderr += chunk

    def read(self, size: int) -> bytes:
        assert self._proc.stdout is not None
        return os.read(self._proc.stdout.fileno(), size)

    def write(self, data: bytes) -> None:
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write(data)
        except (BrokenPipeError, ValueError) as e:
            raise OSError(f"the command stopped reading: {e}") from None

    def finish(self, timeout: float) -> Result:
        try:
            if self._proc.stdin:
                self._proc.stdin.close()
        except OSError:
            pass
        try:
            code = self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.abort()
            code = -1
        self._err_reader.join(timeout=2)
        self._closed = True
        return Result(self.command, "", self._stderr.decode(errors="replace"), code if code >= 0 else -1)

    def abort(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._kill_group(self._proc)

    def stderr_text(self) -> str:
        return self._stderr.decode(errors="replace")
