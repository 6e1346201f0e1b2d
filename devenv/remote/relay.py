"""Local ports relayed through a command on the host (L1): each accepted connection runs the command on
devenv's SSH connection and copies bytes between the socket and the command's stdin/stdout.

For ports no TCP forward can reach: a Slurm compute node's loopback, reached with
`srun --overlap --jobid J ... relay PORT` on the login node (the idea of `docker system dial-stdio` or
`ssh -W`: no port opened on any network). A watcher says when what it reaches is gone (the job ended), so a
held tunnel ends with that reason instead of living on as a zombie.

Starting the command (srun: a job step, through slurmctld) is most of a first request's wait, so one relay per
forward is started with the tunnel, before anyone connects, and the first connection takes it (the URL
devenv prints answers sooner); the others start their own, as before. A caller that started such a relay even
earlier (`up` starts one while it waits for Jupyter: start_spare) hands it to the tunnel instead.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable

from devenv.errors import DevenvError
from devenv.remote.base import Connection
from devenv.remote.sshlib import paramiko
from devenv.remote.tunnels import Forward, LoopbackForwarder, no_delay, transport_of


class CommandTunnel(LoopbackForwarder):
    kind = "relay"
    probe_is_cheap = False   # each connection starts the relay (a job step): a held tunnel must not probe it

    def __init__(self, conn: Connection, forwards: list[Forward], command_for: Callable[[Forward], str],
                 watch: Callable[[], str | None] | None = None, watch_every: float = 3.0,
                 spares: dict[str, Spare] | None = None):
        """spares: relays already started, by forward name (the first connection to that forward takes it)."""
        self.conn = conn
        self.command_for = command_for
        self.ended: str | None = None        # why it stopped on its own (from the watcher), for the message
        # the spares exist before the listeners do: a first client may come at once
        given = spares or {}
        self._spares: dict[str, Spare] = {
            f.name: given.get(f.name) or Spare(functools.partial(self._start_relay, f)) for f in forwards}
        for name in set(given) - set(self._spares):
            given[name].discard()
        super().__init__(conn, forwards)
        if watch is not None:
            threading.Thread(target=self._watch, args=(watch, watch_every), daemon=True, name="relay-watch").start()

    def _start_relay(self, f: Forward) -> paramiko.Channel:
        """A relay started ahead of its client (a spare's thread)."""
        return _start_command(self.conn, self.command_for(f))

    def _relay(self, transport: paramiko.Transport, f: Forward) -> paramiko.Channel:
        return _exec(transport, self.command_for(f))

    def _open(self, transport: paramiko.Transport, peer: tuple[str, int], f: Forward) -> paramiko.Channel:
        spare = self._spares.pop(f.name, None)
        channel = spare.take() if spare is not None else None
        return channel or self._relay(transport, f)

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

    def close(self) -> None:
        for spare in list(self._spares.values()):
            spare.discard()
        self._spares.clear()
        super().close()


def _start_command(conn: Connection, command: str) -> paramiko.Channel:
    transport: paramiko.Transport = transport_of(conn)
    no_delay(transport.sock)
    return _exec(transport, command)


def _exec(transport: paramiko.Transport, command: str) -> paramiko.Channel:
    channel = transport.open_session(timeout=15)
    channel.exec_command(command)
    return channel


def start_spare(conn: Connection, command: str) -> Spare:
    """A relay command started now on conn, on a thread, for a CommandTunnel made later (its spares=)."""
    return Spare(functools.partial(_start_command, conn, command))


class Spare:
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
