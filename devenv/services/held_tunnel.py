"""A held tunnel that comes back by itself (L2): the one reconnect loop of every tunnel devenv holds open
(`up` in the foreground, `jupyter`, `tunnel`).

A tunnel dies when its link does: the host's sshd restarted, the ControlMaster was killed, the network went
away (the master's ServerAlive gives up: remote.tunnels.SERVER_ALIVE), the laptop slept long enough for the
host to drop the session. The holder then opens it again on the same local ports (a browser tab keeps working),
through `reopen`, which finds the remote end again (an environment that restarted has a new port or address).
Every step is said on the status line, with a back-off that is quick while the outage is young (recovery
within ~`fast_max` s of the link's return) and slow after `fast_for` s, never a busy loop. Ctrl-C ends it
at once: every wait here is a sleep or a child's wait, which a KeyboardInterrupt cuts.
"""

from __future__ import annotations

import os
import select
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from devenv.errors import DevenvError
from devenv.remote.network_watch import NetworkWatch, open_watch


class Tunnel(Protocol):
    """An open set of local forwards (remote.tunnels' OpenSSH or paramiko tunnel, remote.relay's, or one held
    in the background here)."""

    @property
    def kind(self) -> str: ...

    @property
    def forwards(self) -> list[Any]: ...   # remote.tunnels.Forward

    def alive(self) -> bool: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Backoff:
    """The wait before reconnect attempt N (1-based), given how long the tunnel has been down."""

    first: float = 0.25
    fast_max: float = 1.5      # while the outage is young: the bound on recovery after the link returns
    fast_for: float = 120.0
    slow: float = 10.0         # after that: one ssh login every 10 s, for as long as it takes

    def delay(self, attempt: int, down_for: float) -> float:
        if down_for >= self.fast_for:
            return self.slow
        return min(self.first * 2.0 ** (attempt - 1), self.fast_max)


Reopen = Callable[[list[Any]], Tunnel]   # the forwards to open again (same local ports) -> the live tunnel
Moved = Callable[[list[Any]], bool]      # whether the far end of these forwards is elsewhere now (or gone)


@dataclass
class HeldTunnel:
    """hold() keeps `tunnel` open until Ctrl-C, reopening it through `reopen` whenever it dies. `say` gets
    every status line. A tunnel whose far end ended for good (a Slurm job: its `ended`) is an error instead."""

    host: str
    tunnel: Tunnel
    reopen: Reopen
    say: Callable[[str], None]
    backoff: Backoff = field(default_factory=Backoff)
    check_every: float = 0.5
    reconnects: int = 0
    state: str = "open"          # open | reconnecting
    down_since: float | None = None
    stopped: threading.Event = field(default_factory=threading.Event)   # set: hold() returns (a holder thread)
    # An environment that restarted leaves the link up but the forward pointing at nothing: every probe_every s
    # the first forward is tried (one connection through it); when the far end refuses, `moved` asks the
    # backend, and a far end that moved (or is gone) is reopened (found again) as a dead link is.
    moved: Moved | None = None
    probe_every: float = 15.0
    # while reconnecting, a change of this machine's network (rtnetlink) cuts the back-off's wait short
    watch_network: bool = True
    network_floor: float = 0.25
    _wake: tuple[int, int] = field(init=False, default=(-1, -1), repr=False)

    def hold(self) -> None:
        """Until KeyboardInterrupt (closes the tunnel and re-raises), stop(), or an ended far end (DevenvError).
        Every wait is on `stopped` with a timeout: a signal in the main thread still cuts it."""
        try:
            while not self.stopped.is_set():
                next_probe = time.monotonic() + self.probe_every
                while self.tunnel.alive():
                    if self._wait(next_probe - time.monotonic() if self.moved is not None else self.probe_every):
                        return
                    if self.moved is not None and time.monotonic() >= next_probe:
                        next_probe = time.monotonic() + self.probe_every
                        if self._far_end_moved():
                            break
                ended = getattr(self.tunnel, "ended", None)
                if ended:   # the environment is gone, not the network: reopening cannot work (exit 1)
                    raise DevenvError(f"the tunnel to {self.host} closed: {ended}",
                                      f"`devenv up {self.host}` starts the environment again (its workspace is kept)")
                self.reconnect()
        finally:
            self.tunnel.close()
            for fd in self._wake:
                os.close(fd)
            self._wake = (-1, -1)

    def stop(self) -> None:
        self.stopped.set()
        try:
            os.write(self._wake[1], b"x")
        except OSError:
            pass   # hold() is over and closed it

    def __post_init__(self) -> None:
        self._wake = os.pipe()   # stop() writes to it: a wait in select() ends at once

    def _wait(self, longest: float) -> bool:
        """Until the tunnel may have died, the probe is due (longest s) or stop(); whether stopped. A tunnel
        that gives a file descriptor readable at its death (an OpenSSH master's pidfd) is waited on in
        select(): no wakeup at all while it lives; any other is looked at every check_every s."""
        exit_fd = getattr(self.tunnel, "exit_fd", None)
        fd = exit_fd() if exit_fd is not None else None
        if fd is None:
            return self.stopped.wait(min(self.check_every, max(0.0, longest)))
        try:
            select.select([fd, self._wake[0]], [], [], max(0.0, longest))
        except (OSError, ValueError):   # closed under us (the master replaced): look again
            pass
        return self.stopped.is_set()

    def _far_end_moved(self) -> bool:
        forwards = list(self.tunnel.forwards)
        if not getattr(self.tunnel, "probe_is_cheap", True):   # a relay's connection is a job step: its
            return False                                          # watcher says when what it reaches ended
        if not forwards or not refuses(forwards[0].local_port) or self.moved is None:
            return False
        try:
            moved = self.moved(forwards)
        except (DevenvError, OSError, subprocess.SubprocessError):
            return False    # cannot tell now (the link itself may be going): the next probe asks again
        if moved:
            self.say(f"what the tunnel to {self.host} reached is gone or moved (the environment restarted?)")
        return moved

    def reconnect(self) -> None:
        """Open the tunnel again on the same local ports; retries, with back-off and a line each, until it does."""
        self.state = "reconnecting"
        self.down_since = started = time.monotonic()
        forwards = list(self.tunnel.forwards)
        self.tunnel.close()
        self.say(f"the tunnel to {self.host} dropped; reconnecting (local ports "
                 f"{', '.join(str(f.local_port) for f in forwards)} kept)")
        attempt = 0
        watch = open_watch() if self.watch_network else None
        try:
            while not self.stopped.is_set():
                attempt += 1
                tried = time.monotonic()
                try:
                    self.tunnel = self.reopen(forwards)
                except (DevenvError, OSError, subprocess.SubprocessError) as e:
                    why = e.message if isinstance(e, DevenvError) else str(e) or type(e).__name__
                    down = time.monotonic() - started
                    delay = self.backoff.delay(attempt, down)
                    self.say(f"reconnecting to {self.host} (attempt {attempt}, {down:.0f} s): "
                             f"{_first_line(why)}; next try in {delay:g} s")
                    if self._pause(delay, watch, tried):
                        self.say(f"the network changed: trying {self.host} again now")
                    continue
                self.reconnects += 1
                self.state, self.down_since = "open", None
                self.say(f"reconnected to {self.host} after {time.monotonic() - started:.1f} s "
                         f"(attempt {attempt}); the same local ports answer again")
                return
        finally:
            if watch is not None:
                watch.close()

    def _pause(self, delay: float, watch: NetworkWatch | None, tried: float) -> bool:
        """The back-off's wait before the next attempt, cut short by stop() or by a change of this machine's
        network (a link up, an address or route added: remote.network_watch); whether the network changed.
        Never a busy loop: a change retries at once only when the last attempt began network_floor s ago or
        more (a host that creates links all the time gets one attempt each network_floor s at most)."""
        end = time.monotonic() + delay
        while not self.stopped.is_set():
            left = end - time.monotonic()
            if left <= 0:
                return False
            if watch is None:
                self.stopped.wait(left)
                continue
            try:
                ready, _, _ = select.select([watch.fileno(), self._wake[0]], [], [], left)
            except (OSError, ValueError):
                self.stopped.wait(left)
                continue
            if watch.fileno() in ready and watch.changed():
                soonest = tried + self.network_floor
                if time.monotonic() < soonest:
                    self.stopped.wait(soonest - time.monotonic())
                return True
        return False


def refuses(port: int, wait: float = 2.0) -> bool:
    """Whether a connection through the forward on 127.0.0.1:port is closed at once (ssh could not reach the
    far end: it closes the local side). A server that speaks first, or waits for a request, is not refusing."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=wait) as s:
            s.settimeout(wait)
            return s.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "failed"


class HeldInBackground:
    """A HeldTunnel held on a daemon thread, for a front end that must not block on it (the monitor's `j`):
    it looks like the tunnel it holds (kind, forwards, alive, close). alive() stays true while it reconnects;
    close() stops the holder and closes the tunnel. The status lines go to `say` (the front end's log)."""

    def __init__(self, held: HeldTunnel):
        self.held = held
        self.ended: str | None = None
        self._thread = threading.Thread(target=self._hold, name=f"held-tunnel-{held.host}", daemon=True)
        self._thread.start()

    def _hold(self) -> None:
        try:
            self.held.hold()
        except DevenvError as e:
            self.ended = e.message
            self.held.say(e.message)

    @property
    def kind(self) -> str:
        return self.held.tunnel.kind

    @property
    def forwards(self) -> list[Any]:
        return self.held.tunnel.forwards

    def alive(self) -> bool:
        return self._thread.is_alive()

    def close(self) -> None:
        self.held.stop()
        self._thread.join(10)


class Together:
    """Several tunnels held as one by one HeldTunnel (`up`'s Jupyter tunnel and a devcontainer's forwardPorts):
    its forwards are theirs in order, it is alive while all are, and a death of any reopens all (reopen_together).
    The first is the one the held tunnel probes (Jupyter's forward first)."""

    def __init__(self, parts: list[Tunnel]):
        self.parts = parts

    @property
    def kind(self) -> str:
        return self.parts[0].kind

    @property
    def forwards(self) -> list[Any]:
        return [f for part in self.parts for f in part.forwards]

    @property
    def ended(self) -> str | None:
        return next((e for part in self.parts if (e := getattr(part, "ended", None))), None)

    @property
    def probe_is_cheap(self) -> bool:
        return bool(getattr(self.parts[0], "probe_is_cheap", True))

    def alive(self) -> bool:
        return all(part.alive() for part in self.parts)

    def exit_fd(self) -> int | None:
        """One descriptor readable when any part dies, where all parts share it (one OpenSSH master); else None
        (looked at every check_every s)."""
        fds = set()
        for part in self.parts:
            exit_fd = getattr(part, "exit_fd", None)
            fds.add(exit_fd() if exit_fd is not None else None)
        return fds.pop() if len(fds) == 1 else None

    def close(self) -> None:
        for part in self.parts:
            part.close()


def reopen_together(parts: list[tuple[int, Reopen]]) -> Reopen:
    """How a Together is opened again: each part's reopen (count: how many of the forwards are its, in order)
    gets its forwards; a part that fails closes the ones opened before it, and the attempt fails as it did."""

    def reopen(forwards: list[Any]) -> Tunnel:
        opened: list[Tunnel] = []
        start = 0
        try:
            for count, part in parts:
                opened.append(part(forwards[start:start + count]))
                start += count
        except BaseException:
            for tunnel in opened:
                tunnel.close()
            raise
        return Together(opened)

    return reopen
