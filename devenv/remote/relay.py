"""Local ports relayed through a command on the host (L1): each accepted connection runs the command on
devenv's SSH connection and copies bytes between the socket and the command's stdin/stdout.

For ports no TCP forward can reach: a Slurm compute node's loopback, reached with
`srun --overlap --jobid J ... relay PORT` on the login node (the idea of `docker system dial-stdio` or
`ssh -W`: no port opened on any network). A watcher says when what it reaches is gone (the job ended), so a
held tunnel ends with that reason instead of living on as a zombie.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

from devenv.errors import DevenvError
from devenv.remote.base import Connection
from devenv.remote.sshlib import paramiko
from devenv.remote.tunnels import Forward, _pump, no_delay, transport_of


class CommandTunnel:
    kind = "relay"

    def __init__(self, conn: Connection, forwards: list[Forward], command_for: Callable[[Forward], str],
                 watch: Callable[[], str | None] | None = None, watch_every: float = 3.0):
        self.conn = conn
        self.forwards = forwards
        self.command_for = command_for
        self.ended: str | None = None        # why it stopped on its own (from the watcher), for the message
        self._closed = threading.Event()
        self._listeners: list[socket.socket] = []
        for f in forwards:
            listener = socket.socket()
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", f.local_port))
            listener.listen(64)
            self._listeners.append(listener)
            threading.Thread(target=self._accept_loop, args=(listener, f), daemon=True,
                             name=f"relay-{f.name}").start()
        if watch is not None:
            threading.Thread(target=self._watch, args=(watch, watch_every), daemon=True, name="relay-watch").start()

    def _accept_loop(self, listener: socket.socket, f: Forward) -> None:
        while not self._closed.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                return
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._serve, args=(client, f), daemon=True).start()

    def _serve(self, client: socket.socket, f: Forward) -> None:
        try:
            transport = transport_of(self.conn)
            no_delay(transport.sock)
            channel = transport.open_session(timeout=15)
            channel.exec_command(self.command_for(f))
        except (OSError, EOFError, paramiko.SSHException, DevenvError):  # refused or gone: drop this client
            client.close()
            return
        _pump(client, channel, self._closed)

    def _watch(self, watch: Callable[[], str | None], every: float) -> None:
        while not self._closed.wait(every):
            try:
                reason = watch()
            except DevenvError:  # a failed look (connection hiccup) is not an ending; the next one decides
                reason = None
            if reason:
                self.ended = reason
                self.close()
                return

    def alive(self) -> bool:
        return not self._closed.is_set()

    def close(self) -> None:
        self._closed.set()
        for listener in self._listeners:
            try:
                listener.close()
            except OSError:
                pass
