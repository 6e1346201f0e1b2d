"""services/environments/lock.py on this machine (LocalConnection: the same script a host runs over SSH): one
holder at a time, the second waits and says so, and a holder that dies (kill -9) does not block the next."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from devenv.errors import DevenvError
from devenv.remote.local import LocalConnection
from devenv.services.environments.lock import up_lock

HOLD = """
import sys
from devenv.remote.local import LocalConnection
from devenv.services.environments import lock
lock.KEEPALIVE_S = float(sys.argv[3])
with lock.up_lock(LocalConnection("here"), sys.argv[1], sys.argv[2], print):
    print("holding", flush=True)
    sys.stdin.read()
"""


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path))   # the lock's folder: the host's ~/.devenv/locks
    return tmp_path


def holder(owner: str, env: str, keepalive_s: float = 2) -> subprocess.Popen:
    """A process holding the lock; keepalive_s: how soon its holder on the host notices that it is gone."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, owner, env, str(keepalive_s)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parent.parent)
    assert proc.stdout.readline().strip() == "holding"
    return proc


def test_the_second_up_waits_for_the_first_and_is_told(home):
    first = holder("t", "env")
    said: list[str] = []
    got = threading.Event()

    def second() -> None:
        with up_lock(LocalConnection("here"), "t", "env", said.append):
            got.set()

    thread = threading.Thread(target=second)
    thread.start()
    deadline = time.monotonic() + 30
    while not said and time.monotonic() < deadline:
        time.sleep(0.05)
    assert said and "Another `up` of 'env'" in said[0]
    assert not got.is_set()
    first.stdin.close()        # the first `up` ends
    first.wait(30)
    thread.join(30)
    assert got.is_set()
    assert (home / ".devenv" / "locks" / "t-env.lock").exists()


def test_a_killed_holder_does_not_block_the_next(home):
    first = holder("t", "env", keepalive_s=0.2)
    first.kill()               # a laptop gone: no release, its connection simply ends
    first.wait(30)
    said: list[str] = []
    with up_lock(LocalConnection("here"), "t", "env", said.append, wait_s=60):
        pass                   # got it (within the holder's keep-alive: it notices in seconds)


def test_other_environments_do_not_wait(home):
    first = holder("t", "env")
    try:
        said: list[str] = []
        with up_lock(LocalConnection("here"), "t", "other", said.append):
            assert said == []
    finally:
        first.kill()
        first.wait(30)


def test_a_holder_that_never_ends_is_an_error_past_the_wait(home):
    first = holder("t", "env")
    try:
        with pytest.raises(DevenvError, match="has held it for"), \
                up_lock(LocalConnection("here"), "t", "env", lambda text: None, wait_s=1):
            pass
    finally:
        first.kill()
        first.wait(30)


class _LostConnection:
    """A connection that was cut while `up` held the lock: closing the holder's stream fails as paramiko does
    when the transport is gone under a channel (EOFError from the packetizer)."""

    name = "lost-host"

    def stream(self, command: str):
        try:
            yield "locked"
            yield "held"
        finally:
            raise EOFError()


def test_the_error_that_ended_up_is_shown_not_the_lost_holders():
    """A connection killed during `up` once ended as 'internal error: EOFError' (exit 70): the lock's holder,
    closed on the way out, raised over the ConnectError that said what happened."""
    from devenv.errors import ConnectError

    lost = _LostConnection()
    with pytest.raises(ConnectError, match="connection lost"), up_lock(lost, "me", "cpu", print):  # type: ignore[arg-type]
        raise ConnectError("connection lost", "run it again")


class _SlowRelease:
    """A host where ending the lock's holder takes a while (over SSH: a login shell that kills it, 0.1-1.5 s by
    the host's load); the release waits for `proceed`."""

    name = "slow-host"

    def __init__(self) -> None:
        self.proceed = threading.Event()
        self.released = threading.Event()

    def stream(self, command: str):
        try:
            yield "locked"
            yield "held"
        finally:
            self.proceed.wait(30)
            self.released.set()


def test_up_goes_on_while_the_holder_is_ended():
    """The lock's release stood between Jupyter answering and the URL (one more command on the host, 1.5 s
    in a trace at load 5); `up` now goes on at once and the holder ends beside it."""
    host = _SlowRelease()
    with up_lock(host, "me", "cpu", print):  # type: ignore[arg-type]
        pass
    assert not host.released.is_set()        # out of the lock while the release still runs
    host.proceed.set()
    assert host.released.wait(30)            # and the holder is ended all the same


def test_a_command_that_ends_after_up_still_ends_the_holder(home):
    """A process that exits right after `up` (--detach) ends the holder on its way out (the release is waited
    for at exit, bounded), so the next `up` does not wait for it."""
    script = ("from devenv.remote.local import LocalConnection\n"
              "from devenv.services.environments.lock import up_lock\n"
              "with up_lock(LocalConnection('here'), 't', 'env', print):\n"
              "    pass\n")
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60,
                   cwd=Path(__file__).resolve().parent.parent)
    said: list[str] = []
    with up_lock(LocalConnection("here"), "t", "env", said.append, wait_s=60):
        assert said == []                    # not busy: the exited process's holder is gone
