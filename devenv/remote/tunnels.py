"""Local port forwards to a host (L1): the user's OpenSSH client when installed, paramiko otherwise.

OpenSSH carries the data (`ssh -N -L`, its own process): a plain paramiko forward is Python copying every
byte (measured 50-90 MB/s against ~430 MB/s for `ssh -L`). The paramiko fallback reuses devenv's open,
verified connection. Either way local ports listen on 127.0.0.1 only; a taken preferred port is replaced by
a free one.
"""

from __future__ import annotations

import os
import select
import shutil
import socket
import subprocess
import threading
import time
from dataclasses import dataclass

from devenv.config.profiles import HostProfile
from devenv.errors import ConnectError, DevenvError
from devenv.remote import openssh
from devenv.remote.base import Connection

READY_TIMEOUT = 20.0


@dataclass(frozen=True)
class Forward:
    name: str            # what it carries, for messages ("jupyter")
    remote_host: str     # as seen from the host ("127.0.0.1", or a container's bridge address)
    remote_port: int
    local_port: int      # on this machine's 127.0.0.1


def transport_of(conn: Connection):
    """The live paramiko Transport of an SSH connection (re-dialled by it if the old one died)."""
    for name in ("transport", "_transport"):
        attr = getattr(conn, name, None)
        if attr is not None:
            return attr() if callable(attr) else attr
    raise DevenvError(f"connection {conn!r} cannot forward ports", "this is a bug in devenv")


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def choose_local_port(preferred: int | None) -> int:
    """The preferred port when it is free on this machine, else any free one."""
    if preferred and port_is_free(preferred):
        return preferred
    return free_port()


class OpenSSHTunnel:
    """`ssh -N -L ...` as a child process; the forwards are up once every local port accepts."""

    kind = "openssh"

    def __init__(self, host: HostProfile, forwards: list[Forward], ssh_binary: str):
        self.host = host
        self.forwards = forwards
        argv = [ssh_binary, "-N", "-o", "ExitOnForwardFailure=yes", "-o", "BatchMode=yes",
                "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=3"]
        for f in forwards:
            argv += ["-L", f"127.0.0.1:{f.local_port}:{f.remote_host}:{f.remote_port}"]
        argv += openssh.host_options(host)
        self.argv = argv
        # Own session: a Ctrl-C meant for devenv reaches ssh only through close(), after devenv is done;
        # and should devenv die without closing it, the kernel ends ssh too (no stray forwarder).
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, start_new_session=True, preexec_fn=_die_with_parent)
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        pending = list(self.forwards)
        while pending:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode(errors="replace").strip()
                raise ConnectError(f"ssh could not open the tunnel to {self.host.name}: "
                                   f"{err.splitlines()[-1] if err else f'exit code {self.proc.returncode}'}",
                                   "check `ssh` to the host by hand, and AllowTcpForwarding on its sshd")
            if time.monotonic() > deadline:
                self.close()
                raise ConnectError(f"the tunnel to {self.host.name} did not open within {READY_TIMEOUT:.0f} s",
                                   "the host may be slow to answer; try again")
            if _accepts(pending[0].local_port):
                pending.pop(0)
            else:
                time.sleep(0.05)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stderr:
            self.proc.stderr.close()


class ParamikoTunnel:
    """Forwards on devenv's own SSH transport: a listener thread each, two pump threads per connection."""

    kind = "paramiko"

    def __init__(self, conn: Connection, forwards: list[Forward]):
        self.conn = conn
        self.forwards = forwards
        self._closed = threading.Event()
        self._listeners: list[socket.socket] = []
        for f in forwards:
            listener = socket.socket()
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", f.local_port))
            listener.listen(64)
            self._listeners.append(listener)
            threading.Thread(target=self._accept_loop, args=(listener, f), daemon=True,
                             name=f"tunnel-{f.name}").start()

    def _accept_loop(self, listener: socket.socket, f: Forward) -> None:
        while not self._closed.is_set():
            try:
                client, peer = listener.accept()
            except OSError:
                return
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # small requests: no Nagle delay
            threading.Thread(target=self._serve, args=(client, peer, f), daemon=True).start()

    def _serve(self, client: socket.socket, peer, f: Forward) -> None:
        try:
            transport = transport_of(self.conn)
            no_delay(transport.sock)
            channel = transport.open_channel("direct-tcpip", (f.remote_host, f.remote_port), peer, timeout=15)
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
                listener.close()
            except OSError:
                pass


def open_tunnel(host: HostProfile, conn: Connection, forwards: list[Forward], prefer_openssh: bool = True):
    """An OpenSSHTunnel when `ssh` is installed (and $DEVENV_TUNNEL is not 'paramiko'), else a ParamikoTunnel."""
    choice = os.environ.get("DEVENV_TUNNEL", "auto")
    ssh_binary = shutil.which("ssh")
    if prefer_openssh and choice != "paramiko" and ssh_binary:
        return OpenSSHTunnel(host, forwards, ssh_binary)
    if choice == "openssh":
        raise DevenvError("DEVENV_TUNNEL=openssh but `ssh` is not installed", "install openssh-client")
    return ParamikoTunnel(conn, forwards)


def no_delay(sock) -> None:
    """TCP_NODELAY on the SSH connection's socket (as OpenSSH sets it): without it a channel open followed by
    a small request waits for the peer's delayed ACK (~40 ms a request). A jump-host channel has no option."""
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except (AttributeError, OSError):
        pass


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


def _pump(client: socket.socket, channel, closed: threading.Event) -> None:
    """Copy both ways until either side ends; one thread, select() on both."""
    try:
        while not closed.is_set():
            readable, _, _ = select.select([client, channel], [], [], 1.0)
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
