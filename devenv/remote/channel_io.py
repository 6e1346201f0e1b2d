"""Reading one exec channel: stdout and stderr together, the remote process group, the end of the command.

Every command we send first prints `devenv-pgid:$$` on stderr. sshd starts each command in a new session
(setsid), so the login shell's pid is the process group of everything the command starts; knowing it lets us
stop the command (`kill -- -PGID`) on timeout or when a stream is closed. We need that because closing a
channel does not stop a process without a pty (it only dies when it next writes), and sshd ignores the SSH
"signal" request for root logins. The tag line is stripped before anyone sees stderr.
"""

from __future__ import annotations

import select
import threading
import time

from devenv.remote.command_script import PGID_TAG
from devenv.remote.sshlib import paramiko

_CHUNK = 65536
_QUIET_AFTER_EXIT = 2.0


class ChannelIO:
    def __init__(self, channel: paramiko.Channel, started: float | None = None):
        self.channel = channel
        self.started = started if started is not None else time.monotonic()  # when the command was sent
        self.startup_s: float | None = None  # from started until the tag line came back
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.pgid: int | None = None
        self._head: bytearray | None = bytearray()  # stderr until the tag line is complete
        self._feeder: threading.Thread | None = None
        self._last_output = time.monotonic()

    def send_stdin(self, data: bytes | None) -> None:
        """Feed stdin from a thread (so a full window cannot deadlock us against the remote's output)."""
        if data is None:
            self.channel.shutdown_write()
            return

        def feed() -> None:
            try:
                self.channel.sendall(data)
                self.channel.shutdown_write()
            except Exception:  # the command exited without reading it all, or the connection died:
                pass           # the run loop reports either

        self._feeder = threading.Thread(target=feed, name="devenv-stdin", daemon=True)
        self._feeder.start()

    def drain(self) -> None:
        ch = self.channel
        while ch.recv_ready():
            self.stdout += ch.recv(_CHUNK)
            self._last_output = time.monotonic()
        while ch.recv_stderr_ready():
            self._feed_stderr(ch.recv_stderr(_CHUNK))
            self._last_output = time.monotonic()

    def _feed_stderr(self, data: bytes) -> None:
        if self._head is None:
            self.stderr += data
            return
        self._head += data
        if b"\n" not in self._head:
            return
        first, rest = bytes(self._head).split(b"\n", 1)
        if first.startswith(PGID_TAG) and first[len(PGID_TAG):].isdigit():
            self.pgid = int(first[len(PGID_TAG):])
            self.startup_s = time.monotonic() - self.started
            self.stderr += rest
        else:
            self.stderr += self._head
        self._head = None

    def stderr_text(self) -> str:
        pending = bytes(self._head or b"")  # a first line that never ended is plain stderr
        return (bytes(self.stderr) + pending).decode(errors="replace")

    def finished(self) -> bool:
        """Closed, or exited with all output in. sshd may send the exit status before output still held back
        by the window, so the status alone is not the end; but a background child that keeps stdout open
        must not hang us as it hangs ssh: after the status, 2 s without output also ends the command."""
        ch = self.channel
        if ch.closed or (ch.eof_received and self.has_exit_status()):
            return True
        return self.has_exit_status() and time.monotonic() - self._last_output > _QUIET_AFTER_EXIT

    def wait(self, seconds: float) -> None:
        """Block until there is output, the command ends, or seconds pass."""
        if seconds <= 0:
            return
        ch = self.channel
        if ch.eof_received or ch.closed:
            ch.status_event.wait(seconds)  # no more output can come; only the exit status
        else:
            select.select([ch], [], [], seconds)

    def has_exit_status(self) -> bool:
        # not channel.exit_status_ready(): that is also true once the channel is merely closed
        return self.channel.exit_status >= 0

    def exit_code(self) -> int:
        """The exit status; -1 when the process ended without one (killed by a signal, or connection lost)."""
        return self.channel.exit_status

    def take_lines(self) -> list[str]:
        """Complete stdout lines received so far (removed from the buffer)."""
        if b"\n" not in self.stdout:
            return []
        done, _, rest = bytes(self.stdout).rpartition(b"\n")
        self.stdout = bytearray(rest)
        return [line.decode(errors="replace").rstrip("\r") for line in done.split(b"\n")]
