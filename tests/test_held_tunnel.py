"""services.held_tunnel's loop on its own: a dead tunnel is reopened on the same local ports, each failed try
said with its attempt and the wait before the next, never a busy loop, and Ctrl-C ends it at once. (The real
links, masters and sshd restarts: tests/integration/test_tunnel_reconnect.py.)"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest

from devenv.errors import ConnectError, PortTaken
from devenv.services.held_tunnel import Backoff, HeldTunnel


@dataclass(frozen=True)
class Forward:
    name: str
    local_port: int


class Tunnel:
    kind = "openssh"

    def __init__(self, forwards, lives: int):
        self.forwards = forwards
        self.lives = lives        # alive() answers True this many times, then False
        self.closed = False

    def alive(self) -> bool:
        self.lives -= 1
        return self.lives >= 0 and not self.closed

    def close(self) -> None:
        self.closed = True


class CtrlC(Tunnel):
    def alive(self) -> bool:
        raise KeyboardInterrupt


def test_a_dropped_tunnel_is_reopened_on_the_same_ports_with_a_line_for_each_try():
    lines: list[str] = []
    asked: list[list[Forward]] = []
    failures = [ConnectError("ssh: connect to host gpu1 port 22: Network is unreachable", "x"),
                PortTaken("local port 8888 (jupyter) is already in use on this machine", "x")]

    def reopen(forwards):
        asked.append(list(forwards))
        if failures:
            raise failures.pop(0)
        return CtrlC(forwards, 0)

    first = Tunnel([Forward("jupyter", 8888)], lives=1)
    # watch_network off: these are the back-off's own lines; a change of this machine's network meanwhile (other
    # tests make links and namespaces) adds "the network changed" between them and failed this in a full run.
    # The wake on a network change is tested on a real link: tests/integration/test_tunnel_reconnect.py.
    held = HeldTunnel("gpu1", first, reopen, lines.append, backoff=Backoff(first=0.01, fast_max=0.02),
                      check_every=0.01, watch_network=False)
    with pytest.raises(KeyboardInterrupt):
        held.hold()
    assert first.closed and held.tunnel.closed          # the old one closed before, the new one on the way out
    assert asked == [[Forward("jupyter", 8888)]] * 3     # the same local port each time
    assert held.reconnects == 1
    assert "dropped" in lines[0] and "8888" in lines[0]
    assert lines[1].startswith("reconnecting to gpu1 (attempt 1, ") and "Network is unreachable" in lines[1]
    assert lines[2].startswith("reconnecting to gpu1 (attempt 2, ") and "already in use" in lines[2]
    assert "next try in" in lines[1] and lines[3].startswith("reconnected to gpu1 after ")


def test_ctrl_c_while_waiting_to_retry_ends_it_and_closes_what_is_open():
    lines: list[str] = []

    def say(line: str) -> None:
        lines.append(line)
        if "attempt 2" in line:
            raise KeyboardInterrupt

    def reopen(forwards):
        raise ConnectError("ssh: connect to host gpu1 port 22: Connection refused", "x")

    first = Tunnel([Forward("port 6006", 6006)], lives=0)
    held = HeldTunnel("gpu1", first, reopen, say, backoff=Backoff(first=0.01, fast_max=0.02), check_every=0.01,
                      watch_network=False)
    with pytest.raises(KeyboardInterrupt):
        held.hold()
    assert first.closed and held.reconnects == 0 and held.state == "reconnecting"


def test_the_back_off_is_quick_while_the_outage_is_young_then_slow_and_never_zero():
    backoff = Backoff()
    young = [backoff.delay(n, 5.0) for n in range(1, 12)]
    assert young[:4] == [0.25, 0.5, 1.0, 1.5] and max(young) == backoff.fast_max
    assert min(young) > 0
    assert backoff.delay(3, backoff.fast_for + 1) == backoff.slow


def test_held_in_the_background_it_stays_alive_while_reconnecting_and_close_ends_it():
    from devenv.services.held_tunnel import HeldInBackground

    lines: list[str] = []
    reopened = []

    def reopen(forwards):
        reopened.append(forwards)
        raise ConnectError("ssh: connect to host gpu1 port 22: Connection refused", "x")

    first = Tunnel([Forward("jupyter", 8888)], lives=0)
    held = HeldInBackground(HeldTunnel("gpu1", first, reopen, lines.append,
                                       backoff=Backoff(first=0.01, fast_max=0.02), check_every=0.01))
    deadline = time.monotonic() + 30
    while len(reopened) < 2 and time.monotonic() < deadline:
        held.held.stopped.wait(0.01)
    assert len(reopened) >= 2 and held.alive()         # reconnecting counts as held
    assert held.forwards == [Forward("jupyter", 8888)] and held.kind == "openssh"
    held.close()
    assert not held.alive() and first.closed


def test_tunnels_held_together_reopen_each_with_its_forwards_and_a_failed_part_closes_the_rest():
    from devenv.services.held_tunnel import Together, reopen_together

    jupyter, ports = [Forward("jupyter", 8888)], [Forward("port 6006", 6006), Forward("port 8080", 8080)]
    together = Together([Tunnel(jupyter, 5), Tunnel(ports, 0)])
    assert together.forwards == jupyter + ports
    assert not together.alive()   # one part dead: all are reopened
    got: list[list[Forward]] = []
    opened: list[Tunnel] = []

    def part(fail: bool):
        def reopen(forwards):
            got.append(forwards)
            if fail:
                raise ConnectError("refused")
            opened.append(Tunnel(forwards, 99))
            return opened[-1]
        return reopen

    again = reopen_together([(1, part(False)), (2, part(False))])(together.forwards)
    assert got == [jupyter, ports] and again.forwards == jupyter + ports and again.alive()
    with pytest.raises(ConnectError):
        reopen_together([(1, part(False)), (2, part(True))])(together.forwards)
    assert opened[-1].closed   # the Jupyter part opened before the failure is not left open
