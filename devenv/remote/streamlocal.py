"""A channel to a unix socket on the SSH server (OpenSSH's `direct-streamlocal@openssh.com`, what `ssh -L
PORT:/path/to.sock` asks for): sshd connects to the socket as the logged-in user and relays it. No shell and no
process start on the host, so it costs one round trip where an exec channel costs a login shell (the user's rc
files) and a program start.

paramiko has no public call for it: Transport.open_channel writes the request's fields only for the channel kinds
it knows (a direct-streamlocal request without its path would be a protocol error that ends the connection). So
open_unix_socket repeats open_channel's few lines with this kind's fields (the socket path, then OpenSSH's two
reserved fields), on the same internals (channel ids, window, open event); tests/integration/test_streamlocal.py
runs it against the test host's sshd.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from devenv.remote.sshlib import paramiko

KIND = "direct-streamlocal@openssh.com"


class SocketRefused(Exception):
    """The server would not connect the channel: streamlocal forwarding disabled (AllowStreamLocalForwarding
    no, a server without the extension), no socket there, or the user may not open it. Carries sshd's reason."""

    def __init__(self, path: str, code: int | None, reason: str):
        super().__init__(f"{path}: {reason or 'refused'}" + (f" (code {code})" if code is not None else ""))
        self.code = code
        self.reason = reason


def open_unix_socket(transport: paramiko.Transport, path: str, timeout: float = 30.0) -> paramiko.Channel:
    """A channel connected to the unix socket at path on the server. SocketRefused when the server says no;
    paramiko.SSHException when the connection itself fails."""
    if not transport.is_active():
        raise paramiko.SSHException("SSH session not active")
    from paramiko.common import cMSG_CHANNEL_OPEN

    t: Any = transport  # open_channel's internals, which paramiko's stubs do not declare
    with t.lock:
        window = t._sanitize_window_size(None)
        packet = t._sanitize_packet_size(None)
        chanid = t._next_channel()
        m = paramiko.Message()
        m.add_byte(cMSG_CHANNEL_OPEN)
        m.add_string(KIND)
        m.add_int(chanid)
        m.add_int(window)
        m.add_int(packet)
        m.add_string(path)
        m.add_string("")   # reserved (OpenSSH: originator address)
        m.add_int(0)       # reserved (OpenSSH: originator port)
        chan: Any = paramiko.Channel(chanid)
        t._channels.put(chanid, chan)
        event = t.channel_events[chanid] = threading.Event()
        t.channels_seen[chanid] = True
        chan._set_transport(transport)
        chan._set_window(window, packet)
    t._send_user_message(m)
    deadline = time.monotonic() + timeout
    while not event.wait(0.05):
        if not transport.is_active():
            raise transport.get_exception() or paramiko.SSHException("Unable to open channel.")
        if time.monotonic() > deadline:
            raise paramiko.SSHException(f"timed out opening a channel to {path}")
    opened: paramiko.Channel | None = t._channels.get(chanid)
    if opened is not None:
        return opened
    error = transport.get_exception()
    if isinstance(error, paramiko.ChannelException):
        raise SocketRefused(path, error.code, error.text)
    raise error or paramiko.SSHException("Unable to open channel.")
