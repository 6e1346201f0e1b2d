"""Local port forwards to a host (L1): the user's OpenSSH client when installed, paramiko otherwise.

OpenSSH carries the data: one `ssh -M -N` ControlMaster per host, each tunnel a forward added to it with
`ssh -O forward` (a plain paramiko forward is Python copying every byte: measured 50-90 MB/s against ~430 MB/s
for `ssh -L`). The paramiko fallback reuses devenv's open, verified connection. Either way local ports
listen on 127.0.0.1 only; a taken preferred port is replaced by a free one.
"""

from __future__ import annotations

import atexit
import errno
import hashlib
import os
import queue
import re
import select
import shutil
import socket
import stat
import subprocess
import tempfile
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from devenv.config import paths
from devenv.config.profiles import HostProfile
from devenv.errors import ConnectError, DevenvError, PortTaken
from devenv.remote import openssh
from devenv.remote.base import Connection

if TYPE_CHECKING:
    from devenv.remote.sshlib import paramiko

READY_TIMEOUT = 20.0
# How a master notices a dead link (network gone, laptop asleep, host powered off): one keepalive after 5 s
# without a word from the host, gone after 3 unanswered (15-20 s). Idle, that is one small packet each way
# every 5 s; a held tunnel then reconnects (services.held_tunnel).
SERVER_ALIVE = ("ServerAliveInterval=5", "ServerAliveCountMax=3")
_ALIAS_SAFE = re.compile(r"[^A-Za-z0-9._-]")
_SOCKET_PATH_MAX = 100  # sun_path is 108 bytes on Linux (104 on macOS); room for the socket's name


@dataclass(frozen=True)
class Forward:
    name: str            # what it carries, for messages ("jupyter")
    remote_host: str     # as seen from the host ("127.0.0.1", or a container's bridge address)
    remote_port: int
    local_port: int      # on this machine's 127.0.0.1


def transport_of(conn: Connection) -> paramiko.Transport:
    """The live paramiko Transport of an SSH connection (re-dialled by it if the old one died)."""
    from devenv.remote.sshlib import paramiko  # imported by every connection that has a transport

    for name in ("transport", "_transport"):
        attr = getattr(conn, name, None)
        found = attr() if callable(attr) else attr
        if isinstance(found, paramiko.Transport):
            return found
    raise DevenvError(f"connection {conn!r} cannot forward ports", "this is a bug in devenv")


def port_is_free(port: int) -> bool:
    """Whether a forward could listen on 127.0.0.1:port now, asked as ssh binds its forwards (SO_REUSEADDR):
    a port whose last connections are in TIME_WAIT (a tunnel just closed) is free, one something listens on
    is not."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def port_taken_error(port: int, name: str) -> PortTaken:
    """The error for a local port another process holds (exit 6), with how to find who."""
    return PortTaken(f"local port {port} ({name}) is already in use on this machine",
                     f"free it (`ss -ltnp 'sport = :{port}'` shows who holds it), name another local port, "
                     "or leave it out to get a free port")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def choose_local_port(preferred: int | None) -> int:
    """The preferred port when it is free on this machine, else any free one."""
    if preferred and port_is_free(preferred):
        return preferred
    return free_port()


class ControlMaster:
    """One `ssh -M -N` per host for this process: every OpenSSH tunnel to the host is a forward added to it
    (`ssh -O forward`) and removed from it (`ssh -O cancel`), so N tunnels cost one login, not N.

    The control socket lives in a private 0700 directory under devenv's state dir (a short one under the
    temp dir if that path is too long for a socket), named by the host, not by ssh's tokens. The master runs
    in its own session, dies with devenv (PR_SET_PDEATHSIG; forked by one long-lived thread, so not with the
    thread that first asked for a tunnel) and is closed by close_masters() at exit. It
    binds nothing itself; each forward binds 127.0.0.1 only. Its stderr goes to a file (a pipe nobody reads
    would fill and stall it), quoted when it fails."""

    def __init__(self, host: HostProfile, ssh_binary: str):
        self.host = host
        self.ssh = ssh_binary
        self.dir = _control_dir()
        self.path = str(self.dir / f"{_ALIAS_SAFE.sub('-', host.name)[:40]}.sock")
        self._log = open(self.dir / f"{_ALIAS_SAFE.sub('-', host.name)[:40]}.log", "w+b")  # noqa: SIM115
        options = openssh.host_options(host)
        self.argv = [ssh_binary, "-M", "-N", "-S", self.path, "-o", "ControlPersist=no",
                     "-o", "ExitOnForwardFailure=yes", "-o", "BatchMode=yes",
                     "-o", SERVER_ALIVE[0], "-o", SERVER_ALIVE[1], *options]
        self._client = [ssh_binary, "-S", self.path, "-o", "ControlMaster=no", *options]
        # Own session: a Ctrl-C meant for devenv reaches ssh only through close(), after devenv is done;
        # and should devenv die without closing it, the kernel ends ssh too (no stray forwarder). Forked by
        # the spawner thread: PR_SET_PDEATHSIG fires when the forking *thread* ends, and the caller's may be
        # a short-lived worker (the `j` bug: a tunnel announced, nobody listening).
        self.proc = spawn(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=self._log, start_new_session=True, preexec_fn=_die_with_parent)
        self._ready = False
        self._lock = threading.Lock()
        self._pidfd: int | None = None

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        """Until the master is logged in (its control socket answers); ConnectError if it exits first."""
        if self._ready:
            return
        deadline = time.monotonic() + timeout
        while not os.path.exists(self.path):
            if self.proc.poll() is not None:
                raise ConnectError(f"ssh could not connect to {self.host.name} for the tunnels: {self._error()}",
                                   "check `ssh` to the host by hand, and AllowTcpForwarding on its sshd")
            if time.monotonic() > deadline:
                self.close()
                raise ConnectError(f"the tunnel to {self.host.name} did not open within {timeout:.0f} s",
                                   "the host may be slow to answer; try again")
            time.sleep(0.02)
        self._ready = True

    def forward(self, f: Forward, cancel: bool = False, ready_timeout: float = READY_TIMEOUT) -> None:
        """Add (or cancel) one local forward on the master."""
        self.wait_ready(ready_timeout)
        spec = f"127.0.0.1:{f.local_port}:{f.remote_host}:{f.remote_port}"
        with self._lock:
            # _client ends in "--", destination: the control command goes before them
            done = subprocess.run([*self._client[:-2], "-O", "cancel" if cancel else "forward", "-L", spec,
                                   *self._client[-2:]], stdin=subprocess.DEVNULL, capture_output=True,
                                  timeout=READY_TIMEOUT)
        if done.returncode != 0 and not cancel:
            if not port_is_free(f.local_port):  # taken since it was chosen: ssh says only "forwarding failed"
                raise port_taken_error(f.local_port, f.name)
            why = done.stderr.decode(errors="replace").strip().splitlines()
            raise ConnectError(f"ssh could not open the tunnel {f.name} to {self.host.name}: "
                               f"{why[-1] if why else f'exit code {done.returncode}'}",
                               f"is 127.0.0.1:{f.local_port} free here? check AllowTcpForwarding on the host's sshd")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def exit_fd(self) -> int | None:
        """A file descriptor that turns readable when the master exits (a pidfd: a holder waits on it in
        select() instead of polling), None where the system has none."""
        if self._pidfd is None and hasattr(os, "pidfd_open"):
            try:
                self._pidfd = os.pidfd_open(self.proc.pid)
            except OSError:   # already gone (and reaped), or no pidfd here: the caller polls alive()
                return None
        return self._pidfd

    def close(self) -> None:
        pidfd, self._pidfd = self._pidfd, None
        if pidfd is not None:
            os.close(pidfd)
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        for leftover in (self.path, self._log.name):
            try:
                os.unlink(leftover)
            except OSError:
                pass

    def _error(self) -> str:
        self._log.flush()
        self._log.seek(0)
        lines = self._log.read().decode(errors="replace").strip().splitlines()
        return lines[-1] if lines else f"exit code {self.proc.returncode}"


_masters: dict[str, ControlMaster] = {}
_masters_lock = threading.Lock()


def control_master(host: HostProfile, ssh_binary: str | None = None) -> ControlMaster:
    """The live master for host, started now if there is none (it logs in in the background: call this
    early, and the login overlaps the work before the first forward)."""
    with _masters_lock:
        master = _masters.get(host.name)
        if master is None or not master.alive():
            if master is not None:
                master.close()
            binary = ssh_binary or shutil.which("ssh")
            if binary is None:
                raise DevenvError("`ssh` is not installed", "install openssh-client")
            master = _masters[host.name] = ControlMaster(host, binary)
        return master


def close_masters() -> None:
    with _masters_lock:
        masters = list(_masters.values())
        _masters.clear()
    for master in masters:
        master.close()


atexit.register(close_masters)


def uses_openssh(host: HostProfile) -> bool:
    """Whether the host's tunnels go through OpenSSH (open_tunnel's choice)."""
    return host.ssh is not None and os.environ.get("DEVENV_TUNNEL", "auto") != "paramiko" and bool(shutil.which("ssh"))


def prestart_tunnels(host: HostProfile) -> None:
    """Start the host's OpenSSH master now (no wait) where tunnels will go through OpenSSH."""
    if uses_openssh(host):
        control_master(host)


def relink(host: HostProfile, timeout: float) -> None:
    """The host's OpenSSH master logged in within timeout (a new one if the last died): ConnectError if not.
    A reconnecting tunnel's first step, and its proof that the network is back."""
    if uses_openssh(host):
        control_master(host).wait_ready(timeout)


class OpenSSHTunnel:
    """Forwards carried by OpenSSH, through the host's one ControlMaster; up once every local port accepts.
    A master that died (network lost, killed) makes alive() false: a dead tunnel is an error, never silent."""

    kind = "openssh"

    def __init__(self, host: HostProfile, forwards: list[Forward], ssh_binary: str,
                 ready_timeout: float = READY_TIMEOUT):
        self.host = host
        self.forwards = forwards
        self.master = control_master(host, ssh_binary)
        self.argv = self.master.argv
        self._added: list[Forward] = []
        try:
            for f in forwards:
                self.master.forward(f, ready_timeout=ready_timeout)
                self._added.append(f)
            self._wait_ready(ready_timeout)
        except BaseException:
            self.close()
            raise

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        pending = list(self.forwards)
        while pending:
            if not self.master.alive():
                raise ConnectError(f"ssh could not open the tunnel to {self.host.name}: {self.master._error()}",
                                   "check `ssh` to the host by hand, and AllowTcpForwarding on its sshd")
            if time.monotonic() > deadline:
                raise ConnectError(f"the tunnel to {self.host.name} did not open within {timeout:.0f} s",
                                   "the host may be slow to answer; try again")
            if _accepts(pending[0].local_port):
                pending.pop(0)
            else:
                time.sleep(0.05)

    def alive(self) -> bool:
        return self.master.alive()

    def exit_fd(self) -> int | None:
        return self.master.exit_fd()

    def close(self) -> None:
        """Cancel this tunnel's forwards; the master stays for the process's other tunnels to the host."""
        added, self._added = self._added, []
        if self.master.alive():
            for f in added:
                try:
                    self.master.forward(f, cancel=True)
                except (OSError, subprocess.SubprocessError):
                    pass  # the master is going away; its forwards go with it


class LoopbackForwarder:
    """Listeners on the laptop's 127.0.0.1, one per forward; each accepted connection gets a channel of
    devenv's SSH transport (what kind: `_open`, per subclass) and two pump threads. Never binds 0.0.0.0."""

    kind = "forwarder"

    def __init__(self, conn: Connection, forwards: list[Forward]):
        self.conn = conn
        self.forwards = forwards
        self._closed = threading.Event()
        self._listeners: list[socket.socket] = []
        for f in forwards:
            listener = socket.socket()
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                listener.bind(("127.0.0.1", f.local_port))
            except OSError as e:
                listener.close()
                self.close()
                if e.errno == errno.EADDRINUSE:
                    raise port_taken_error(f.local_port, f.name) from None
                raise DevenvError(f"cannot listen on 127.0.0.1:{f.local_port} for {f.name}: {e.strerror}",
                                  "name another local port") from None
            listener.listen(64)
            self._listeners.append(listener)
            threading.Thread(target=self._accept_loop, args=(listener, f), daemon=True,
                             name=f"{self.kind}-{f.name}").start()

    def _open(self, transport: paramiko.Transport, peer: tuple[str, int], f: Forward) -> paramiko.Channel:
        """The channel that carries one accepted connection to what `f` names."""
        raise NotImplementedError

    def _accept_loop(self, listener: socket.socket, f: Forward) -> None:
        while not self._closed.is_set():
            try:
                client, peer = listener.accept()
            except OSError:
                return
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # small requests: no Nagle delay
            threading.Thread(target=self._serve, args=(client, peer, f), daemon=True).start()

    def _serve(self, client: socket.socket, peer: tuple[str, int], f: Forward) -> None:
        try:
            transport = transport_of(self.conn)
            no_delay(transport.sock)
            channel = self._open(transport, peer, f)
        except Exception:  # the remote end refused or the connection is gone: drop this client only
            client.close()
            return
        _pump(client, channel, self._closed)

    def alive(self) -> bool:
        return not self._closed.is_set()

    def close(self) -> None:
        self._closed.set()
        for listener in self._listeners:
            try:
                # shutdown first: close() alone leaves the port listening while a thread is blocked in accept()
                # (the kernel socket outlives the fd), and the next client would still be served
                listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            listener.close()


class ParamikoTunnel(LoopbackForwarder):
    """Forwards on devenv's own SSH transport (direct-tcpip), for when `ssh` is not installed."""

    kind = "paramiko"

    def _open(self, transport: paramiko.Transport, peer: tuple[str, int], f: Forward) -> paramiko.Channel:
        return transport.open_channel("direct-tcpip", (f.remote_host, f.remote_port), peer, timeout=15)


def open_tunnel(host: HostProfile, conn: Connection, forwards: list[Forward],
                prefer_openssh: bool = True, ready_timeout: float = READY_TIMEOUT) -> OpenSSHTunnel | ParamikoTunnel:
    """An OpenSSHTunnel when `ssh` is installed (and $DEVENV_TUNNEL is not 'paramiko'), else a ParamikoTunnel."""
    choice = os.environ.get("DEVENV_TUNNEL", "auto")
    ssh_binary = shutil.which("ssh")
    if prefer_openssh and choice != "paramiko" and ssh_binary:
        return OpenSSHTunnel(host, forwards, ssh_binary, ready_timeout)
    if choice == "openssh":
        raise DevenvError("DEVENV_TUNNEL=openssh but `ssh` is not installed", "install openssh-client")
    return ParamikoTunnel(conn, forwards)


def control_dir_path() -> Path:
    """Where this DEVENV_HOME's control sockets go: the state dir, or (a path too long for a socket) a
    directory in the temp dir named by the user and a hash of the state dir."""
    preferred = paths.state_dir() / "ssh"
    if len(str(preferred)) + 46 <= _SOCKET_PATH_MAX:
        return preferred
    digest = hashlib.sha256(str(preferred).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"devenv-ssh-{os.geteuid()}-{digest}"


def _control_dir() -> Path:
    """The control socket directory, made private (0700); one in the shared temp dir must be a real
    directory of ours, never a link or someone else's (a squatted name is refused)."""
    path = control_dir_path()
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        raise DevenvError(f"{path} is not a directory of yours: refusing to put SSH control sockets there",
                          "remove it, or set DEVENV_HOME to a shorter path")
    os.chmod(path, 0o700)
    return path


def no_delay(sock: object) -> None:
    """TCP_NODELAY on the SSH connection's socket (as OpenSSH sets it): without it a channel open followed by
    a small request waits for the peer's delayed ACK (~40 ms a request). A jump-host channel has no option."""
    if not isinstance(sock, socket.socket):
        return  # a channel through a jump host
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError:
        pass


class _Spawner:
    """One daemon thread that forks the children which must die with devenv (PR_SET_PDEATHSIG) but not with
    the thread that asked for them: it lives until the process exits, so their parent "dies" only then."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[list[str], dict[str, Any], Future[subprocess.Popen[bytes]]]] = (
            queue.SimpleQueue())
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def popen(self, argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name="devenv-spawner", daemon=True)
                self._thread.start()
        done: Future[subprocess.Popen[bytes]] = Future()
        self._jobs.put((argv, kwargs, done))
        return done.result()

    def _serve(self) -> None:
        while True:
            argv, kwargs, done = self._jobs.get()
            try:
                done.set_result(subprocess.Popen(argv, **kwargs))
            except BaseException as e:  # handed to the caller, raised in its thread
                done.set_exception(e)


_spawner = _Spawner()


def spawn(argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """subprocess.Popen(argv, **kwargs) in bytes mode, forked by the long-lived spawner thread (see _Spawner)."""
    return _spawner.popen(argv, **kwargs)


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the parent dies (Linux prctl PR_SET_PDEATHSIG; else nothing)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGTERM))
    except (OSError, AttributeError):
        pass


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


def _pump(client: socket.socket, channel: paramiko.Channel, closed: threading.Event) -> None:
    """Copy both ways until either side ends; one thread, select() on both."""
    try:
        while not closed.is_set():
            ends: list[socket.socket | paramiko.Channel] = [client, channel]
            readable, _, _ = select.select(ends, [], [], 1.0)
            if client in readable:
                data = client.recv(65536)
                if not data:
                    break
                channel.sendall(data)
            if channel in readable:
                data = channel.recv(65536)
                if not data:
                    break
                client.sendall(data)
    except OSError:
        pass
    finally:
        channel.close()
        client.close()
