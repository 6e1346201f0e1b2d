"""OpenSSH tunnels through one ControlMaster per host, against the real test host's sshd (127.0.0.1:2201).

The remote end of each forward is the host's own sshd, so a forward that works answers with an SSH banner."""

from __future__ import annotations

import os
import signal
import socket
import stat
import threading
import time
from pathlib import Path

import pytest

from devenv.config import hostref
from devenv.errors import PortTaken
from devenv.remote import tunnels
from devenv.remote.pool import get_connection
from devenv.remote.tunnels import Forward, free_port, open_tunnel

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def no_masters_left():
    yield
    tunnels.close_masters()


def banner(port: int) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.settimeout(5)
        return s.recv(64).decode(errors="replace")


def masters_of(path: str) -> list[int]:
    """pids of live `ssh -M` processes using this control path."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if b"-M" in argv and path.encode() in argv:
            found.append(int(cmdline.parent.name))
    return found


def test_two_tunnels_share_one_master_and_close_cleanly(use_testhost):
    host = hostref.load_host("testbox")
    a = open_tunnel(host, None, [Forward("a", "127.0.0.1", 2201, free_port())])  # type: ignore[arg-type]
    b = open_tunnel(host, None, [Forward("b", "127.0.0.1", 2201, free_port()),
                                 Forward("c", "127.0.0.1", 2201, free_port())])  # type: ignore[arg-type]
    assert a.kind == b.kind == "openssh"
    assert a.master is b.master
    assert masters_of(a.master.path) == [a.master.proc.pid]
    for f in [*a.forwards, *b.forwards]:
        assert banner(f.local_port).startswith("SSH-2.0-")
    control_dir = Path(a.master.path).parent
    assert stat.S_IMODE(control_dir.stat().st_mode) == 0o700
    outside = _outside_address()
    with socket.socket() as s, pytest.raises(OSError):  # forwards listen on loopback only
        s.settimeout(1)
        s.connect((outside, a.forwards[0].local_port))

    a.close()  # cancels a's forward only
    time.sleep(0.2)
    with pytest.raises(OSError):
        banner(a.forwards[0].local_port)
    assert banner(b.forwards[0].local_port).startswith("SSH-2.0-")

    path = a.master.path
    tunnels.close_masters()
    assert masters_of(path) == [] and not os.path.exists(path)


def test_a_killed_master_is_noticed_and_the_next_tunnel_gets_a_new_one(use_testhost):
    host = hostref.load_host("testbox")
    tunnel = open_tunnel(host, None, [Forward("a", "127.0.0.1", 2201, free_port())])  # type: ignore[arg-type]
    old = tunnel.master
    os.kill(old.proc.pid, signal.SIGKILL)
    old.proc.wait(10)
    assert not tunnel.alive()  # never a silent zombie: a held tunnel sees it and reconnects (test_tunnel_reconnect)

    again = open_tunnel(host, None, [Forward("a", "127.0.0.1", 2201, free_port())])  # type: ignore[arg-type]
    assert again.master is not old and again.alive()
    assert banner(again.forwards[0].local_port).startswith("SSH-2.0-")


def test_a_master_started_from_a_thread_that_ends_still_carries_tunnels(use_testhost):
    """ssh gets PR_SET_PDEATHSIG, which Linux fires when the *thread* that forked it ends. The first tunnel of a
    host may be asked for from a short-lived worker thread (a TUI key, a prestart): its master must outlive it."""
    host = hostref.load_host("testbox")
    started = []
    worker = threading.Thread(target=lambda: started.append(tunnels.control_master(host)), name="short-lived")
    worker.start()
    worker.join()
    assert not worker.is_alive()
    master = started[0]
    master.wait_ready()
    forward = Forward("a", "127.0.0.1", 2201, free_port())
    master.forward(forward)
    assert banner(forward.local_port).startswith("SSH-2.0-")
    assert master.alive() and masters_of(master.path) == [master.proc.pid]
    # and the next tunnel, opened from yet another thread that ends, goes through that same live master
    opened = []
    other = threading.Thread(target=lambda: opened.append(
        open_tunnel(host, None, [Forward("b", "127.0.0.1", 2201, free_port())])))  # type: ignore[arg-type]
    other.start()
    other.join()
    assert opened[0].master is master and master.alive()
    assert banner(opened[0].forwards[0].local_port).startswith("SSH-2.0-")


def test_a_forward_to_a_taken_local_port_is_an_error(use_testhost):
    host = hostref.load_host("testbox")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        # a taken local port is its own error (exit 6, README), not "cannot connect"
        with pytest.raises(PortTaken, match=f"local port {port} .* already in use"):
            open_tunnel(host, None, [Forward("a", "127.0.0.1", 2201, port)])  # type: ignore[arg-type]


def _outside_address() -> str:
    """An address of this machine that is not loopback (the tunnel must not listen there)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))
            address = s.getsockname()[0]
        except OSError:
            address = "127.0.0.1"
    if address.startswith("127."):
        pytest.skip("this machine has no non-loopback address to try")
    return address


def test_without_openssh_the_paramiko_fallback_forwards_on_devenv_s_own_connection(use_testhost, monkeypatch):
    monkeypatch.setenv("DEVENV_TUNNEL", "paramiko")
    host = hostref.load_host("testbox")
    conn = get_connection(host)
    try:
        tunnel = open_tunnel(host, conn, [Forward("a", "127.0.0.1", 2201, free_port()),
                                          Forward("b", "127.0.0.1", 2201, free_port())])
        assert tunnel.kind == "paramiko" and tunnel.alive()
        for f in tunnel.forwards:
            assert banner(f.local_port).startswith("SSH-2.0-")
        tunnel.close()
        assert not tunnel.alive()
        with pytest.raises(OSError):     # closed means closed: it used to serve one more client (accept() blocked)
            banner(tunnel.forwards[0].local_port)
    finally:
        conn.close()
