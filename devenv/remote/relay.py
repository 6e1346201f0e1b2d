"""Local ports relayed through a command on the host (L1): each accepted connection runs the command on
devenv's SSH connection and copies bytes between the socket and the command's stdin/stdout.

For ports no TCP forward can reach: a Slurm compute node's loopback, reached with
`srun --overlap --jobid J ... relay PORT` on the login node (the idea of `docker system dial-stdio` or
`ssh -W`: no port opened on any network). A watcher says when what it reaches is gone (the job ended), so a
held tunnel ends with that reason instead of living on as a zombie.

Starting the command (srun: a job step, through slurmctld) is most of a first request's wait, so one relay per
forward is started with the tunnel, before anyone connects, and the first connection takes it (the URL
devenv prints answers sooner); the others start their own, as before.
"""

from __future__ import annotations

import functools
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
        self._spares: dict[str, _Spare] = {f.name: _Spare(functools.partial(self._open, f)) for f in forwards}

    def _accept_loop(self, listener: socket.socket, f: Forward) -> None:
        while not self._closed.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                return
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._serve, args=(client, f), daemon=True).start()

    def _open(self, f: Forward) -> paramiko.Channel:
        transport = transport_of(self.conn)
        no_delay(transport.sock)
        channel: paramiko.Channel = transport.open_session(timeout=15)
        channel.exec_command(self.command_for(f))
        return channel

    def _serve(self, client: socket.socket, f: Forward) -> None:
        spare = self._spares.pop(f.name, None)
        channel = spare.take() if spare is not None else None
        try:
            channel = channel or self._open(f)
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
        for spare in list(self._spares.values()):
            spare.discard()
        self._spares.clear()
        for listener in self._listeners:
            try:
                listener.close()
            except OSError:
                pass


class _Spare:
    """A relay started ahead of its client, on a thread: take() waits for it (it is already under way), and
    gives None when it failed or has already ended (the caller then starts its own); discard() closes it."""

    def __init__(self, start: Callable[[], paramiko.Channel]):
        self._channel: paramiko.Channel | None = None
        self._ready = threading.Event()

        def run() -> None:
            try:
                self._channel = start()
            except (OSError, EOFError, paramiko.SSHException, DevenvError):
                self._channel = None
            self._ready.set()

        threading.Thread(target=run, name="relay-spare", daemon=True).start()

    def take(self) -> paramiko.Channel | None:
        self._ready.wait(30)
        channel, self._channel = self._channel, None
        if channel is None or channel.closed or channel.exit_status_ready():
            if channel is not None:
                channel.close()
            return None
        return channel

    def discard(self) -> None:
        self._ready.wait(5)
        if self._channel is not None:
            self._channel.close()
            self._channel = None
