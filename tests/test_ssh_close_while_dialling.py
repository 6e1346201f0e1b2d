"""Closing an SSHConnection while it dials ends the dial: close() does not wait out ConnectTimeout.

A host that accepts TCP and never sends its SSH banner (a hung sshd, a port something else holds) keeps a dial
waiting until ConnectTimeout. `devenv gpus @group` answers within its --timeout and leaves that dial to a
daemon thread; whoever then closes the pool (pool.close_all: a test's teardown, a long-lived process dropping a
host) used to wait on the dial's lock for the rest of ConnectTimeout (115 s in a .ci/run teardown, with a
profile's connect_timeout: 120). The listener here is a real socket on loopback that accepts and stays silent.
"""

from __future__ import annotations

import socket
import threading

import pytest

from devenv.config.profiles import SSHTarget
from devenv.errors import ConnectError
from devenv.remote.ssh import SSHConnection

pytestmark = pytest.mark.timeout(120)

BOUND_S = 30  # the test's own bound for close() and the dial to end; ConnectTimeout is 20 times that


@pytest.fixture
def silent_listener():
    """A TCP port that accepts and never says a word; yields (port, the event 'a client connected')."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    accepted = threading.Event()
    held: list[socket.socket] = []

    def accept() -> None:
        try:
            conn, _ = server.accept()
        except OSError:
            return
        held.append(conn)
        accepted.set()

    threading.Thread(target=accept, daemon=True).start()
    yield server.getsockname()[1], accepted
    server.close()
    for conn in held:
        conn.close()


def test_close_ends_a_dial_that_waits_for_a_silent_hosts_banner(silent_listener):
    port, accepted = silent_listener
    conn = SSHConnection(SSHTarget(hostname="127.0.0.1", port=port, user="root", connect_timeout=600), name="silent")
    failure: list[BaseException] = []

    def dial() -> None:
        try:
            conn.run("true")
        except BaseException as e:  # what the dial ended with, judged below
            failure.append(e)

    dialling = threading.Thread(target=dial, daemon=True)
    dialling.start()
    assert accepted.wait(BOUND_S), "the dial never reached the listener"

    closing = threading.Thread(target=conn.close, daemon=True)
    closing.start()
    closing.join(BOUND_S)
    assert not closing.is_alive(), "close() waits for the dial to time out (ConnectTimeout 600 s)"
    dialling.join(BOUND_S)
    assert not dialling.is_alive(), "the dial goes on after close()"
    assert len(failure) == 1 and isinstance(failure[0], ConnectError), failure
    assert "silent" in failure[0].message and "Traceback" not in failure[0].message
    assert not conn.is_connected
    conn.close()  # twice is safe
