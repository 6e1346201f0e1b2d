"""Local ports relayed through a command on the host (L1): each accepted connection runs the command on
devenv's SSH connection and copies bytes between the socket and the command's stdin/stdout.

For ports no TCP forward can reach: a Slurm compute node's loopback, reached with
`srun --overlap --jobid J ... relay PORT` on the login node (the idea of `docker system dial-stdio` or
`ssh -W`: no port opened on any network). A watcher says when what it reaches is gone (the job ended), so a
held tunnel ends with that reason instead of living on as a zombie.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from devenv.errors import DevenvError
from devenv.remote.base import Connection
from devenv.remote.tunnels import Forward, LoopbackForwarder

if TYPE_CHECKING:
    from devenv.remote.sshlib import paramiko


class CommandTunnel(LoopbackForwarder):
    kind = "relay"

    def __init__(self, conn: Connection, forwards: list[Forward], command_for: Callable[[Forward], str],
                 watch: Callable[[], str | None] | None = None, watch_every: float = 3.0):
        self.command_for = command_for
        self.ended: str | None = None        # why it stopped on its own (from the watcher), for the message
        super().__init__(conn, forwards)
        if watch is not None:
            threading.Thread(target=self._watch, args=(watch, watch_every), daemon=True, name="relay-watch").start()

    def _open(self, transport: paramiko.Transport, peer: tuple[str, int], f: Forward) -> paramiko.Channel:
        channel = transport.open_session(timeout=15)
        channel.exec_command(self.command_for(f))
        return channel

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
