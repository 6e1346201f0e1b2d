"""Open an authenticated paramiko Transport to a resolved target, through its ProxyJump hops.

Each hop is a full SSH session: TCP (first hop, or ProxyCommand), else a `direct-tcpip` channel on the
previous hop's transport; then key exchange, the host-key check against known_hosts (before any key is
offered, so credentials never reach an unverified host), then authentication. Every socket/paramiko failure
becomes one ConnectError naming the hop and saying what to do.
"""

from __future__ import annotations

import logging
import socket
from dataclasses import replace

import paramiko

from devenv.errors import ConnectError, DevenvError
from devenv.remote import hostkeys, keepalive
from devenv.remote.auth import authenticate
from devenv.remote.sshconfig import ResolvedTarget

_NETWORK_ERRORS = (OSError, EOFError, paramiko.SSHException)
# paramiko logs failures with tracebacks; with no handler, Python would print them to stderr. We report
# each failure once, as a ConnectError (an app that configures logging still receives paramiko's records).
logging.getLogger("paramiko").addHandler(logging.NullHandler())


def open_chain(target: ResolvedTarget, *, accept_new_host: bool) -> list[paramiko.Transport]:
    """Transports in dialling order; the last one reaches target. Closes what it opened on failure."""
    transports: list[paramiko.Transport] = []
    hops = [*(replace(j, label=f"jump host {j.label}") for j in target.jumps), target]
    try:
        for i, hop in enumerate(hops):
            sock = _connect(hop, transports[-1] if transports else None, hops[i - 1] if i else None)
            transports.append(_session(sock, hop, accept_new_host))
    except BaseException:
        close_chain(transports)
        raise
    # pings travel through every hop, so watching the last transport notices any hop dying
    keepalive.watch(transports[-1], target.server_alive_interval, target.server_alive_count_max)
    return transports


def close_chain(transports: list[paramiko.Transport]) -> None:
    for t in reversed(transports):
        try:
            t.close()
        except Exception:  # closing a dead transport may raise; there is nothing left to save
            pass


def _connect(hop: ResolvedTarget, via: paramiko.Transport | None, via_hop: ResolvedTarget | None):
    if via is not None:
        try:
            return via.open_channel("direct-tcpip", (hop.hostname, hop.port), ("127.0.0.1", 0),
                                    timeout=hop.connect_timeout)
        except paramiko.ChannelException as e:
            reason = {1: "it refuses to forward (AllowTcpForwarding no?)", 2: "the connection failed there"}
            raise ConnectError(
                f"{via_hop.label} ({via_hop.address}) cannot reach {hop.label} ({hop.address}): "
                f"{reason.get(e.code, e.text)}",
                "check HostName/Port of the target as seen from the jump host, and that sshd runs there") from None
        except _NETWORK_ERRORS as e:
            raise _lost_during_setup(via_hop, e) from None
    if hop.proxy_command:
        try:
            return paramiko.ProxyCommand(hop.proxy_command)
        except OSError as e:
            raise ConnectError(f"ProxyCommand for {hop.label} failed to start: {e}",
                               "fix ProxyCommand in ~/.ssh/config (or set ProxyCommand none)") from None
    try:
        return socket.create_connection((hop.hostname, hop.port), timeout=hop.connect_timeout)
    except socket.gaierror:
        raise ConnectError(f"cannot resolve host name '{hop.hostname}' ({hop.label})",
                           "check HostName in the profile or ~/.ssh/config, and your DNS / VPN") from None
    except ConnectionRefusedError:
        raise ConnectError(f"cannot connect to {hop.label} at {hop.address}: connection refused",
                           f"is sshd running and listening on port {hop.port}? check Port in the profile or "
                           "~/.ssh/config") from None
    except TimeoutError:
        raise ConnectError(f"cannot connect to {hop.label} at {hop.address}: no answer within "
                           f"{hop.connect_timeout:g}s",
                           "the host may be down or a firewall drops SSH; if it is only reachable through a "
                           "bastion, set ssh.proxy_jump (ProxyJump)") from None
    except OSError as e:
        raise ConnectError(f"cannot connect to {hop.label} at {hop.address}: {e.strerror or e}",
                           "check the address, your network and VPN") from None


def _session(sock, hop: ResolvedTarget, accept_new_host: bool) -> paramiko.Transport:
    transport = paramiko.Transport(sock)
    try:
        transport.banner_timeout = transport.auth_timeout = hop.connect_timeout
        known = hostkeys.known_keys(hop.hostname, hop.port)
        preferred = hostkeys.preferred_key_types(known)
        if preferred:
            options = transport.get_security_options()
            offered = list(options.key_types)
            options.key_types = [k for k in preferred if k in offered] + [k for k in offered if k not in preferred]
        try:
            transport.start_client(timeout=hop.connect_timeout)
        except _NETWORK_ERRORS as e:
            why = (f"no SSH banner within {hop.connect_timeout:g}s" if "banner" in str(e) else _why(e))
            raise ConnectError(f"SSH handshake with {hop.label} ({hop.address}) failed: {why}",
                               f"is an SSH server listening on port {hop.port}? (`ssh -v -p {hop.port} "
                               f"{hop.hostname}` shows the same exchange)") from None
        key = transport.get_remote_server_key()
        hostkeys.verify(hop.label, hop.hostname, hop.port, key.get_name(), key.asbytes(),
                        accept_new=accept_new_host)
        authenticate(transport, hop)
        return transport
    except DevenvError:
        transport.close()
        raise
    except _NETWORK_ERRORS as e:
        transport.close()
        raise _lost_during_setup(hop, e) from None


def _lost_during_setup(hop: ResolvedTarget, e: BaseException) -> ConnectError:
    return ConnectError(f"connection to {hop.label} ({hop.address}) was lost while setting up: {_why(e)}",
                        "try again; if it persists, check the host's sshd logs and your network")


def _why(e: BaseException) -> str:
    text = str(e).strip()
    return text or type(e).__name__
