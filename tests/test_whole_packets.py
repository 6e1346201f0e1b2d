"""An interrupt (SIGTERM here, as `kill` sends it; Ctrl-C alike) that comes while the main thread is in the middle of
an SSH packet is raised only once the packet is written, so the connection still works for the way out
(remote/whole_packets.py, cli/signals.py). Against a real paramiko server in this process, over a socket pair, with
the cipher and MAC the test host's sshd gave when the bug was seen (aes128-ctr, a separate MAC): before the fix the
interrupt cut the packet after its cipher step, the server failed the next packet's MAC and dropped the connection."""

from __future__ import annotations

import os
import signal
import socket
import threading

import paramiko
import paramiko.packet
import pytest

from devenv.cli import signals
from devenv.remote import whole_packets


class _EchoServer(paramiko.ServerInterface):
    def get_allowed_auths(self, username: str) -> str:
        return "none"

    def check_auth_none(self, username: str) -> int:
        return paramiko.AUTH_SUCCESSFUL

    def check_channel_request(self, kind: str, chanid: int) -> int:
        return paramiko.OPEN_SUCCEEDED


def _echo(server: paramiko.Transport) -> None:
    while True:
        chan = server.accept(timeout=30)
        if chan is None:
            return
        threading.Thread(target=_echo_channel, args=(chan,), daemon=True).start()


def _echo_channel(chan: paramiko.Channel) -> None:
    while data := chan.recv(65536):
        chan.sendall(data)
    chan.close()


@pytest.fixture
def default_handlers():
    """The handlers a plain `devenv` process starts with (an xdist worker has its own), back afterwards."""
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    for sig, handler in before.items():
        signal.signal(sig, handler)


@pytest.fixture
def connected(default_handlers):
    """A client transport, authenticated, to an in-process server that echoes every channel."""
    ours, theirs = socket.socketpair()
    server = paramiko.Transport(theirs)
    server.add_server_key(paramiko.ECDSAKey.generate())
    server.start_server(event=threading.Event(), server=_EchoServer())   # with an event: it does not block
    threading.Thread(target=_echo, args=(server,), daemon=True).start()
    whole_packets.install()
    client = paramiko.Transport(ours)
    options = client.get_security_options()
    options.ciphers = ("aes128-ctr",)       # a cipher with a separate MAC, as the test host's sshd negotiated
    options.digests = ("hmac-sha2-256",)
    client.start_client(timeout=30)
    client.auth_none("t")
    yield client
    client.close()
    server.close()


def _round_trip(client: paramiko.Transport, data: bytes) -> bytes:
    chan = client.open_session(timeout=10)
    chan.settimeout(10)
    chan.sendall(data)
    got = b""
    while len(got) < len(data):
        piece = chan.recv(65536)
        if not piece:
            break
        got += piece
    chan.close()
    return got


def test_sigterm_in_the_middle_of_a_packet_is_raised_after_it_and_the_connection_still_works(connected,
                                                                                             monkeypatch):
    compute_hmac = paramiko.packet.compute_hmac
    fired = []

    def signal_mid_packet(key, message, digest_class):
        # the packet's cipher step has run and the packet is not yet written: the worst moment for an interrupt
        if threading.current_thread() is threading.main_thread() and not fired:
            fired.append(True)
            os.kill(os.getpid(), signal.SIGTERM)   # its handler runs in this thread, here, before we return
        return compute_hmac(key, message, digest_class)

    chan = connected.open_session(timeout=10)
    monkeypatch.setattr(paramiko.packet, "compute_hmac", signal_mid_packet)
    with signals.ending_signals_interrupt(), pytest.raises(signals.Stopped):
        chan.sendall(b"x" * 4096)
    monkeypatch.setattr(paramiko.packet, "compute_hmac", compute_hmac)

    assert fired
    # the way out can still use the connection: a new channel, and data through it both ways
    assert _round_trip(connected, b"still here" * 1000) == b"still here" * 1000
    assert connected.is_active()


def test_ctrl_c_in_the_middle_of_a_packet_is_raised_after_it(connected, monkeypatch):
    compute_hmac = paramiko.packet.compute_hmac
    fired = []

    def ctrl_c_mid_packet(key, message, digest_class):
        if threading.current_thread() is threading.main_thread() and not fired:
            fired.append(True)
            os.kill(os.getpid(), signal.SIGINT)
        return compute_hmac(key, message, digest_class)

    chan = connected.open_session(timeout=10)
    monkeypatch.setattr(paramiko.packet, "compute_hmac", ctrl_c_mid_packet)
    with signals.ending_signals_interrupt(), pytest.raises(KeyboardInterrupt):
        chan.sendall(b"y" * 4096)
    monkeypatch.setattr(paramiko.packet, "compute_hmac", compute_hmac)

    assert fired
    assert _round_trip(connected, b"ok" * 100) == b"ok" * 100


def test_outside_a_packet_the_interrupt_is_raised_at_once_and_a_second_held_one_at_once_too():
    with pytest.raises(KeyboardInterrupt):
        whole_packets.interrupt(KeyboardInterrupt())
    whole_packets._sending = 1
    try:
        whole_packets.interrupt(signals.Stopped(signal.SIGTERM))      # held: a packet is being written
        with pytest.raises(KeyboardInterrupt):                         # the user insists: no waiting for it
            whole_packets.interrupt(KeyboardInterrupt())
    finally:
        whole_packets._sending = 0
        whole_packets._held = None
