"""SSHConnection: the Connection protocol over paramiko, behaving as OpenSSH would.

- Opens lazily on first use (resolving ~/.ssh/config then), reopens if the transport died, closes twice safely.
- One transport carries every command as its own channel, so threads may run commands concurrently.
- Commands run in the remote login shell (POSIX sh/bash expected). `env` becomes `export` lines in front of
  the command, because sshd's AcceptEnv refuses most names. Those lines are part of the command text (visible
  in `ps` on the host and in sshd's debug logs): NEVER pass secrets in env or on a command line; write them
  to a file with put(), whose data travels on stdin.
- Every command has a timeout; on timeout, or when a stream() generator is closed, the remote process group
  is killed (see channel_io) and the channel closed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import replace
from shlex import quote
from typing import TYPE_CHECKING

from devenv.errors import CommandFailed, CommandTimeout, ConnectError, DevenvError
from devenv.remote import dial, keepalive
from devenv.remote.base import DEFAULT_TIMEOUT, Result
from devenv.remote.channel_io import ChannelIO
from devenv.remote.command_script import stop_script, wrap_command
from devenv.remote.sshconfig import ResolvedTarget, resolve
from devenv.remote.sshlib import paramiko

if TYPE_CHECKING:  # the ssh section of a host profile; for its type only
    from devenv.config.profiles import SSHTarget
    from devenv.remote.pipe import SSHPipe

log = logging.getLogger(__name__)  # under "devenv": `devenv -v` / DEVENV_DEBUG=1 show it (cli.setup_logging)

_CHANNEL_ERRORS = (paramiko.SSHException, EOFError, OSError)
_OPEN_ATTEMPTS = 3
# sshd's MaxSessions (default 10) caps channels per connection; keep run() below it, leaving room for streams.
_MAX_CONCURRENT_RUNS = 6


class SSHConnection:
    def __init__(self, target: SSHTarget | ResolvedTarget, *, name: str | None = None,
                 accept_new_host: bool = False):
        """target: a host profile's ssh section, or an already ResolvedTarget."""
        self._target = target
        given = target.label if isinstance(target, ResolvedTarget) else target.alias or target.hostname
        self.name: str = name or given or ""  # "" only for a target naming no host, which resolve refuses
        self.accept_new_host = accept_new_host
        self._chain: list[paramiko.Transport] = []
        self._resolved = target if isinstance(target, ResolvedTarget) else None
        self._lock = threading.Lock()
        self._runs = threading.BoundedSemaphore(_MAX_CONCURRENT_RUNS)
        # paramiko keeps one "last error" per transport: two threads opening channels at once can read each
        # other's refusal (or none). Opening is one round trip, so opens go one at a time.
        self._opening = threading.Lock()
        self._last_loss: str | None = None  # why the keepalive dropped a transport of this connection
        self._ahead: threading.Thread | None = None        # dial_ahead's dialling thread
        self._ahead_error: BaseException | None = None     # ... and its failure, for the first caller
        self._dialling: dial.Dialling | None = None          # the dial in progress, which close() ends

    def loss_reason(self) -> str | None:
        """Why the keepalive dropped this connection (the live one, or one re-dialled since), if it did."""
        current = self._chain[-1] if self._chain else None
        if current is not None and not current.is_active():
            return keepalive.reason(current)
        return self._last_loss

    # --- lifecycle ----------------------------------------------------------------------------------

    @property
    def resolved(self) -> ResolvedTarget:
        if self._resolved is None:  # resolved at first use, so ~/.ssh/config errors surface there
            assert not isinstance(self._target, ResolvedTarget)  # one is resolved from the start
            self._resolved = replace(resolve(self._target), label=self.name)
        return self._resolved

    @property
    def is_connected(self) -> bool:
        return bool(self._chain) and self._chain[-1].is_active()

    def open(self) -> None:
        self.transport()

    def dial_ahead(self) -> None:
        """Start dialling now, in the background, so that the connection is up (or has failed) by the time the
        first command needs it, while this process still imports and prepares. A failure is raised, once, by
        that first call, as if it had dialled itself (the same error, exit code and hint)."""
        if self._ahead is not None or self.is_connected:
            return
        self._ahead = threading.Thread(target=self._dial_in_background, name="devenv-dial-ahead", daemon=True)
        self._ahead.start()

    def _dial_in_background(self) -> None:
        try:
            self.transport()
        except dial.DialCancelled:
            pass  # closed while dialling ahead: the next caller dials anew
        except BaseException as exc:  # handed to the first caller of transport()
            self._ahead_error = exc

    def transport(self) -> paramiko.Transport:
        """The live authenticated Transport (for port forwarding); dialled, or re-dialled if it died."""
        with self._lock:
            failed, self._ahead_error = self._ahead_error, None
            if failed is not None:
                raise failed
            if self._chain and self._chain[-1].is_active():
                return self._chain[-1]
            if self._chain:
                self._last_loss = keepalive.reason(self._chain[-1])
                log.info("%s: the SSH connection died (%s); reconnecting", self.name,
                         keepalive.reason(self._chain[-1]) or "closed")
            dial.close_chain(self._chain)  # a dead pooled transport is replaced, never reused
            self._chain = []
            started = time.monotonic()
            self._dialling = dialling = dial.Dialling()
            try:
                self._chain = dial.open_chain(self.resolved, accept_new_host=self.accept_new_host, dialling=dialling)
            finally:
                self._dialling = None
            log.debug("%s: connected to %s in %.3f s", self.name, self.resolved.address, time.monotonic() - started)
            return self._chain[-1]

    def close(self) -> None:
        """Close the connection; a dial in progress (a silent host's banner awaited) is ended, not waited out."""
        dialling = self._dialling
        if dialling is not None:
            dialling.cancel()
        with self._lock:
            chain, self._chain = self._chain, []
        dial.close_chain(chain)

    def __enter__(self) -> SSHConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "open" if self.is_connected else "closed"
        return f"<SSHConnection {self.name} {state}>"

    # --- commands -----------------------------------------------------------------------------------

    def run(self, command: str, *, timeout: float = DEFAULT_TIMEOUT, check: bool = False,
            stdin: bytes | str | None = None, env: dict[str, str] | None = None) -> Result:
        data = stdin.encode() if isinstance(stdin, str) else stdin
        started = time.monotonic()
        with self._runs:
            io = self._start(command, env)
            ended = False
            try:
                io.send_stdin(data)
                deadline = time.monotonic() + timeout
                while not io.finished():
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise CommandTimeout(command, timeout, self.name)
                    io.wait(min(remaining, 0.5))
                    io.drain()
                io.drain()
                ended = True
                self._raise_if_lost(io, command)
            finally:
                if not ended:  # timeout, Ctrl-C, ...: the remote command must not outlive us
                    self._stop(io)
                io.channel.close()
        result = Result(command, io.stdout.decode(errors="replace"), io.stderr_text(),
                        io.exit_code(), io.startup_s)
        log.debug("%s: exit %s in %.3f s: %s", self.name, result.exit_code, time.monotonic() - started,
                  command.strip().splitlines()[0][:160] if command.strip() else "")  # never secrets: stdin isn't shown
        if check and not result.ok:
            raise CommandFailed(result)
        return result

    def stream(self, command: str, *, timeout: float | None = None) -> Generator[str, None, None]:
        """Yield stdout lines as they come. Closing the generator kills the remote command. A command that
        ends on its own with a non-zero code raises CommandFailed (with its stderr) after its last line."""
        io = self._start(command, None)
        ended = False
        try:
            io.send_stdin(None)
            deadline = time.monotonic() + timeout if timeout else None
            while True:
                yield from io.take_lines()
                if io.finished():
                    break
                if deadline and time.monotonic() >= deadline:  # only with a timeout
                    raise CommandTimeout(command, timeout or 0.0, self.name)
                io.wait(min(0.5, deadline - time.monotonic()) if deadline else 0.5)
                io.drain()
            io.drain()
            yield from io.take_lines()
            if io.stdout:
                yield io.stdout.decode(errors="replace")
            self._raise_if_lost(io, command)
            ended = True
        finally:
            try:
                if not ended:
                    self._stop(io)
                io.channel.close()
            except _CHANNEL_ERRORS:
                pass  # the connection went under it: whatever ended the stream is the news, not this close
        result = Result(command, "", io.stderr_text(), io.exit_code())
        if not result.ok:
            raise CommandFailed(result)

    def output_stream(self, command: str) -> tuple[Iterator[tuple[bytes, bytes]], Callable[[], int]]:
        """Run command with no time limit; (chunks of (stdout, stderr) bytes as they come, the exit code once
        they are read: -1 when it ended without one). Closing the chunks early (Ctrl-C) kills the command."""
        io = self._start(command, None)
        io.send_stdin(None)

        def chunks() -> Iterator[tuple[bytes, bytes]]:
            ended = False
            try:
                while True:
                    io.drain()
                    if io.stdout or io.stderr:
                        out, err = bytes(io.stdout), bytes(io.stderr)
                        io.stdout.clear()
                        io.stderr.clear()
                        yield out, err
                    if io.finished():
                        break
                    io.wait(0.5)
                io.drain()
                tail = (bytes(io.stdout), io.stderr_text().encode())
                if any(tail):
                    yield tail
                self._raise_if_lost(io, command)
                ended = True
            finally:
                if not ended:
                    self._stop(io)
                io.channel.close()

        return chunks(), io.exit_code

    def open_pipe(self, command: str) -> SSHPipe:
        """command started, its stdin and stdout a byte pipe (remote.pipe); abort() kills it on the host."""
        from devenv.remote.pipe import SSHPipe

        return SSHPipe(self._start(command, None), command, self._stop)

    def put(self, data: bytes, remote_path: str, mode: int = 0o644) -> None:
        """Write data to remote_path atomically (temp file + mv), private until chmod; data goes on stdin."""
        target = _shell_path(remote_path)
        script = (f"umask 077; tmp=$(mktemp {target}.devenv-XXXXXX) || exit 1; "
                  f'if cat > "$tmp" && chmod {mode:o} "$tmp" && mv -f "$tmp" {target}; then exit 0; fi; '
                  f'rm -f "$tmp"; exit 1')
        result = self.run(script, stdin=data, timeout=60 + len(data) / 1e6)
        if not result.ok:
            raise DevenvError(f"cannot write {remote_path} on {self.name}: {result.stderr.strip()}",
                              f"check that the directory exists and that {self.resolved.user} may write there")

    def ping(self, timeout: float = 10.0) -> float:
        """One SSH-level round trip in seconds: a global request the server must answer (OpenSSH replies
        "failure" to keepalive@openssh.com). No shell, no command: the network and sshd, nothing else."""
        transport = self.transport()
        answered = threading.Event()

        def ask() -> None:
            try:
                transport.global_request("keepalive@openssh.com", wait=True)
            except _CHANNEL_ERRORS:
                return
            answered.set()

        start = time.perf_counter()
        threading.Thread(target=ask, name="devenv-ping", daemon=True).start()
        if not answered.wait(timeout):
            if not transport.is_active():
                raise self._lost("(round-trip probe)")
            raise ConnectError(f"{self.name} did not answer an SSH keepalive within {timeout:g}s",
                               "the link or the host is stalled; try again")
        return time.perf_counter() - start

    def probe_forwarding(self) -> tuple[bool | None, str]:
        """Does sshd allow TCP forwarding (devenv's tunnels need it)? (allowed, detail); None = cannot tell.

        Opens a direct-tcpip channel to 127.0.0.1:9 on the host: sshd refuses it as "administratively
        prohibited" when forwarding is off; a merely failed connect there means forwarding itself is allowed."""
        transport = self.transport()
        try:
            with self._opening:
                channel = transport.open_channel("direct-tcpip", ("127.0.0.1", 9), ("127.0.0.1", 0),
                                                 timeout=self.resolved.connect_timeout)
            channel.close()
        except paramiko.ChannelException as e:
            if e.code == paramiko.common.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED:
                return False, "sshd refuses TCP forwarding (administratively prohibited)"
            return True, "sshd allows TCP forwarding"
        except _CHANNEL_ERRORS as e:
            return None, f"could not probe forwarding: {e}"
        return True, "sshd allows TCP forwarding"

    def open_port(self, host: str, port: int, timeout: float) -> paramiko.Channel:
        """A direct-tcpip channel to host:port as the SSH server sees it (no process on the host): a stream
        with socket's calls. ConnectionRefusedError when the server could not connect there; CannotProbe when
        it refuses TCP forwarding."""
        from devenv.remote.portprobe import CannotProbe
        from devenv.remote.tunnels import no_delay

        transport = self.transport()
        no_delay(transport.sock)  # a small request and its answer: no delayed-ACK stall (as OpenSSH sets it)
        try:
            with self._opening:
                channel = transport.open_channel("direct-tcpip", (host, port), ("127.0.0.1", 0), timeout=timeout)
        except paramiko.ChannelException as e:
            if e.code == paramiko.common.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED:
                raise CannotProbe(f"sshd on {self.name} refuses TCP forwarding",
                                  "allow it (AllowTcpForwarding local) for tunnels and quick probes") from None
            raise ConnectionRefusedError(f"{host}:{port}: {e.text or 'connect failed'}") from None
        except _CHANNEL_ERRORS as e:
            if not transport.is_active():
                raise self._lost(f"(connect to {host}:{port})") from None
            raise TimeoutError(f"no channel to {host}:{port}: {e}") from None
        return channel

    # --- internals ----------------------------------------------------------------------------------

    def _start(self, command: str, env: dict[str, str] | None) -> ChannelIO:
        script = wrap_command(command, env)
        transport = self.transport()
        for attempt in range(_OPEN_ATTEMPTS):
            try:
                with self._opening:
                    channel = transport.open_session(timeout=self.resolved.connect_timeout)
                sent = time.monotonic()
                channel.exec_command(script)
                return ChannelIO(channel, sent)
            except _CHANNEL_ERRORS as e:
                if not transport.is_active():
                    raise self._lost(command) from None
                if attempt == _OPEN_ATTEMPTS - 1:
                    raise ConnectError(
                        f"{self.name}: cannot start a command: {type(e).__name__}: {e}",
                        "the host's sshd refused a new session on this connection (MaxSessions?); try again") from None
                # a busy server (dropbear, sshd at MaxSessions) may refuse a session that it accepts a moment later
                time.sleep(0.2 * (attempt + 1))
        raise AssertionError("unreachable")

    def _stop(self, io: ChannelIO) -> None:
        """Kill the command's process group on the host, then close its channel."""
        deadline = time.monotonic() + 2
        while io.pgid is None and not io.finished() and time.monotonic() < deadline:
            io.wait(0.1)
            io.drain()
        if io.pgid is not None and not io.has_exit_status():
            try:
                transport = self._chain[-1] if self.is_connected else None
                if transport is not None:
                    self._raw_run(transport, stop_script(io.pgid), timeout=5)
            except _CHANNEL_ERRORS:
                pass  # the connection is going away; sshd ends the session with it
        io.channel.close()

    @staticmethod
    def _raw_run(transport: paramiko.Transport, script: str, timeout: float) -> None:
        channel = transport.open_session(timeout=timeout)
        try:
            channel.exec_command(script)
            channel.status_event.wait(timeout)
        finally:
            channel.close()

    def _raise_if_lost(self, io: ChannelIO, command: str) -> None:
        """A channel that closed without an exit status: the process died by a signal, or the connection
        did. paramiko closes the channels a moment before it marks the transport inactive, so give it 1 s."""
        if io.has_exit_status():
            return
        transport = io.channel.get_transport()
        deadline = time.monotonic() + 1
        while time.monotonic() < deadline:
            if not transport.is_active():
                raise self._lost(command)
            time.sleep(0.02)

    def _lost(self, command: str) -> ConnectError:
        why = self.loss_reason()
        return ConnectError(
            f"connection to {self.name} ({self.resolved.address}) lost while running: {command}"
            + (f" ({why})" if why else ""),
            "the host rebooted, sshd restarted or the network dropped; re-run the command "
            "(devenv reconnects on the next command)")


def _shell_path(path: str) -> str:
    """Quote a remote path for the shell; a leading ~/ means the remote home, as with scp."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + quote(path[2:])
    return quote(path)
