"""Open an authenticated paramiko Transport to a resolved target, through its ProxyJump hops.

Each hop is a full SSH session: TCP (first hop, or ProxyCommand), else a `direct-tcpip` channel on the
previous hop's transport; then key exchange, the host-key check (before any key is offered, so credentials
never reach an unverified host), then authentication. Every socket/paramiko failure becomes one ConnectError
naming the hop and saying why (refused, timed out, key rejected, host key unknown/changed/revoked).

Timeouts as OpenSSH's: ConnectTimeout bounds the TCP connect and the wait for the server's banner only; the
key exchange and authentication get their own, longer limit (a slow link that ssh reaches, we reach too).
A ProxyCommand runs as OpenSSH runs it: `exec COMMAND` in the user's $SHELL, on one end of a socket pair; its
exit is noticed at once (the socket closes) and its stderr is quoted in the error.
A dial can be ended from another thread (Dialling.cancel: SSHConnection.close while a dial waits): what it has
opened is closed, so a wait for a banner, a key exchange or a jump host's channel ends then, not at its timeout.
"""

from __future__ import annotations

import io
import logging
import os
import signal
import socket
import subprocess
import threading
import time
from dataclasses import replace

from devenv.errors import ConnectError, DevenvError
from devenv.remote import algorithms, hostkeys, keepalive, known_hosts_command, whole_packets
from devenv.remote.auth import authenticate
from devenv.remote.sshconfig import ResolvedTarget
from devenv.remote.sshlib import paramiko

_NETWORK_ERRORS = (OSError, EOFError, paramiko.SSHException)
HANDSHAKE_TIMEOUT = 60.0   # key exchange + authentication, after the banner (OpenSSH has none; we want an end)
# paramiko logs failures with tracebacks; with no handler, Python would print them to stderr. We report
# each failure once, as a ConnectError (an app that configures logging still receives paramiko's records).
logging.getLogger("paramiko").addHandler(logging.NullHandler())


class DialCancelled(ConnectError):
    """The dial was ended by Dialling.cancel (the connection was closed while it was being dialled)."""


class Dialling:
    """One dial in progress, which another thread may end: cancel() closes every socket and transport the dial
    has opened so far (and any it opens after), so its wait fails now. The TCP connect itself is still bounded by
    ConnectTimeout only (its socket is made inside socket.create_connection)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._opened: list[paramiko.Transport | paramiko.Channel | socket.socket] = []
        self.cancelled = False

    def track(self, opened: paramiko.Transport | paramiko.Channel | socket.socket) -> None:
        with self._lock:
            if not self.cancelled:
                self._opened.append(opened)
                return
        _close_quietly(opened)  # cancelled before it was tracked: the dial's next wait fails at once

    def cancel(self) -> None:
        with self._lock:
            self.cancelled = True
            opened, self._opened = self._opened, []
        for thing in reversed(opened):
            _close_quietly(thing)


def _close_quietly(thing: paramiko.Transport | paramiko.Channel | socket.socket) -> None:
    try:
        thing.close()
    except Exception:  # closing what a dial half-opened may raise; it is being given up
        pass


def open_chain(target: ResolvedTarget, *, accept_new_host: bool,
               dialling: Dialling | None = None) -> list[paramiko.Transport]:
    """Transports in dialling order; the last one reaches target. Closes what it opened on failure.
    dialling: lets another thread end this dial (DialCancelled is raised here then)."""
    transports: list[paramiko.Transport] = []
    hops = [*(replace(j, label=f"jump host {j.label}") for j in target.jumps), target]
    try:
        for i, hop in enumerate(hops):
            sock = _connect(hop, transports[-1] if transports else None, hops[i - 1] if i else None)
            if dialling is not None:
                dialling.track(sock)
            transports.append(_session(sock, hop, accept_new_host, dialling))
        if dialling is not None and dialling.cancelled:
            raise DialCancelled(f"connection to {target.label} ({target.address}) was closed while it was being "
                                "dialled", "re-run the command")
    except BaseException as e:
        close_chain(transports)
        if dialling is not None and dialling.cancelled and not isinstance(e, DialCancelled):
            raise DialCancelled(f"connection to {target.label} ({target.address}) was closed while it was being "
                                "dialled", "re-run the command") from None
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


class ProxySocket(socket.socket):
    """Our end of a socket pair whose other end is a ProxyCommand's stdin and stdout."""

    proc: subprocess.Popen[bytes]
    command: str
    _stderr: bytearray
    _watcher: threading.Thread

    @classmethod
    def spawn(cls, command: str) -> ProxySocket:
        ours, theirs = socket.socketpair()
        shell = os.environ.get("SHELL") or "/bin/sh"
        try:
            proc = subprocess.Popen([shell, "-c", f"exec {command}"], stdin=theirs.fileno(), stdout=theirs.fileno(),
                                    stderr=subprocess.PIPE, close_fds=True, start_new_session=True)
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
        sock = cls(ours.family, ours.type, fileno=ours.detach())
        sock.proc, sock.command, sock._stderr = proc, command, bytearray()
        sock._watcher = threading.Thread(target=sock._watch, name="devenv-proxycommand", daemon=True)
        sock._watcher.start()
        return sock

    def _watch(self) -> None:
        """Collect stderr (bounded) and, when the command exits, end our side so paramiko sees EOF now."""
        stderr = self.proc.stderr
        assert isinstance(stderr, io.BufferedIOBase)  # a PIPE, buffered (read1: what has come, up to 4096)
        for chunk in iter(lambda: stderr.read1(4096), b""):
            if len(self._stderr) < 16384:
                self._stderr += chunk
        self.proc.wait()
        try:
            self.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def exit_report(self, wait: float = 1.0) -> str | None:
        """'exited with code N: <stderr tail>' once the command has ended (waits up to `wait` s), else None."""
        deadline = time.monotonic() + wait
        try:
            code = self.proc.wait(wait)
        except subprocess.TimeoutExpired:
            return None
        # the command's exit can come before the watcher has read what it wrote: read to its EOF first (a
        # child that keeps stderr open is waited for until the deadline only)
        self._watcher.join(max(0.2, deadline - time.monotonic()))
        tail = " | ".join(self._stderr.decode(errors="replace").strip().splitlines()[-3:])
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        return how + (f": {tail}" if tail else " (no error output)")

    def close(self) -> None:
        super().close()
        proc = getattr(self, "proc", None)
        if proc is not None and proc.poll() is None:
            try:  # OpenSSH sends SIGHUP to its proxy on exit
                os.killpg(proc.pid, signal.SIGHUP)
            except OSError:
                pass


def _connect(hop: ResolvedTarget, via: paramiko.Transport | None,
             via_hop: ResolvedTarget | None) -> paramiko.Channel | socket.socket:
    if via is not None:
        assert via_hop is not None  # a hop dialled through another knows which
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
            return ProxySocket.spawn(hop.proxy_command)
        except OSError as e:
            raise ConnectError(f"ProxyCommand for {hop.label} failed to start: {e.strerror or e}",
                               "fix ProxyCommand in your ssh config (or set ProxyCommand none)") from None
    family = _ADDRESS_FAMILIES.get(str(hop.options.get("addressfamily") or "any").lower(), socket.AF_UNSPEC)
    try:
        return _tcp_connect_attempts(hop, family)
    except (socket.gaierror, UnicodeError):  # UnicodeError: a name IDNA cannot encode (an empty or long label)
        only = {socket.AF_INET: " as IPv4 (AddressFamily inet)",
                socket.AF_INET6: " as IPv6 (AddressFamily inet6)"}.get(family, "")
        from devenv.config.ssh_hosts import did_you_mean

        meant = did_you_mean(hop.label) if hop.hostname == hop.label else None  # a name typed, not a HostName
        raise ConnectError(f"cannot resolve host name '{hop.hostname}' ({hop.label}){only}",
                           (f"did you mean {meant}? (a host profile or ssh alias) " if meant else "")
                           + "check HostName in the profile or ~/.ssh/config, and your DNS / VPN") from None
    except ConnectionRefusedError:
        raise ConnectError(f"cannot connect to {hop.label} at {hop.address}: connection refused",
                           f"is sshd running and listening on port {hop.port}? check Port in the profile or "
                           "~/.ssh/config") from None
    except TimeoutError:
        raise ConnectError(f"cannot connect to {hop.label} at {hop.address}: timed out after "
                           f"{hop.connect_timeout:g}s (ConnectTimeout)",
                           "the host may be down or a firewall drops SSH; if it is only reachable through a "
                           "bastion, set ssh.proxy_jump (ProxyJump)") from None
    except OSError as e:
        raise ConnectError(f"cannot connect to {hop.label} at {hop.address}: {e.strerror or e}",
                           "check the address, your network and VPN") from None


_ADDRESS_FAMILIES = {"inet": socket.AF_INET, "inet6": socket.AF_INET6}


def _tcp_connect_attempts(hop: ResolvedTarget, family: int) -> socket.socket:
    """ConnectionAttempts as ssh makes them: up to N connects (each bounded by ConnectTimeout), a second
    apart; a name that does not resolve is not tried again (ssh resolves it once); the last failure is said."""
    try:
        attempts = min(100, max(1, int(str(hop.options.get("connectionattempts") or 1))))
    except ValueError:
        attempts = 1
    for attempt in range(attempts):
        try:
            return _tcp_connect(hop, family)
        except socket.gaierror:
            raise
        except OSError:
            if attempt == attempts - 1:
                raise
            time.sleep(1)
    raise AssertionError("unreachable")


def _tcp_connect(hop: ResolvedTarget, family: int) -> socket.socket:
    """TCP to the hop as ssh dials it: each address of its AddressFamily in turn, from BindAddress if set."""
    bind = hop.options.get("bindaddress")
    if family == socket.AF_UNSPEC and not bind:
        return socket.create_connection((hop.hostname, hop.port), timeout=hop.connect_timeout)
    last: OSError | None = None
    for fam, kind, proto, _, address in socket.getaddrinfo(hop.hostname, hop.port, family, socket.SOCK_STREAM):
        sock = socket.socket(fam, kind, proto)
        try:
            sock.settimeout(hop.connect_timeout)
            if bind:
                sock.bind((str(bind), 0))
            sock.connect(address)
            return sock
        except OSError as e:
            sock.close()
            last = e
    raise last or OSError(f"no address for {hop.hostname}")


def _session(sock: paramiko.Channel | socket.socket, hop: ResolvedTarget, accept_new_host: bool,
             dialling: Dialling | None = None) -> paramiko.Transport:
    whole_packets.install()   # an interrupt must not cut a packet: the way out still needs this transport
    try:
        transport = paramiko.Transport(sock)
    except _NETWORK_ERRORS as e:
        sock.close()
        raise _proxy_failure(sock, hop) or _lost_during_setup(hop, e) from None
    if dialling is not None:
        dialling.track(transport)
    try:
        transport.banner_timeout = hop.connect_timeout
        transport.auth_timeout = max(HANDSHAKE_TIMEOUT, hop.connect_timeout)
        known = hostkeys.known_keys(hop.hostname, hop.port, name=hostkeys.lookup_name(hop),
                                    files=hostkeys.hop_files(hop))
        known += known_hosts_command.run(hop, "ORDER", hop.hostname).keys   # ssh asks it for the order too
        preferred = hostkeys.preferred_key_types(known)
        security = transport.get_security_options()
        config = getattr(hop, "options", None) or {}
        # what the user's ssh would offer, less what paramiko lacks (remote/algorithms.py)
        security.kex = algorithms.narrowed(config, "kexalgorithms", security.kex, hop.label)
        security.ciphers = algorithms.narrowed(config, "ciphers", security.ciphers, hop.label)
        security.digests = algorithms.narrowed(config, "macs", security.digests, hop.label)
        # paramiko appends the certificate variants itself (preferred_keys); list them to reorder them
        offered = algorithms.narrowed(config, "hostkeyalgorithms",
                                      [k for k in transport.preferred_keys if k.count("-cert-v01@") <= 1], hop.label)
        security.key_types = [k for k in preferred if k in offered] + [k for k in offered if k not in preferred]
        done = threading.Event()
        limit = max(HANDSHAKE_TIMEOUT, hop.connect_timeout)
        try:
            transport.start_client(event=done)  # returns at once; we wait, so a timeout is an error
            deadline = time.monotonic() + limit
            while not done.wait(0.05):
                if not transport.is_active():
                    raise transport.get_exception() or paramiko.SSHException("Negotiation failed.")
                if time.monotonic() >= deadline:
                    raise ConnectError(
                        f"SSH key exchange with {hop.label} ({hop.address}) did not finish within {limit:g}s: "
                        "timed out", "the host or the link is very slow, or something in between holds the "
                        "connection open; try `ssh -v` to the same host")
            if not transport.is_active():
                raise transport.get_exception() or paramiko.SSHException("Negotiation failed.")
        except _NETWORK_ERRORS as e:
            raise _handshake_error(sock, hop, e) from None
        key = transport.get_remote_server_key()
        hostkeys.verify_hop(hop, key, accept_new=accept_new_host)
        authenticate(transport, hop)
        return transport
    except DevenvError:
        transport.close()
        raise
    except _NETWORK_ERRORS as e:
        transport.close()
        raise _proxy_failure(sock, hop) or _lost_during_setup(hop, e) from None


def _handshake_error(sock: paramiko.Channel | socket.socket, hop: ResolvedTarget, e: BaseException) -> ConnectError:
    proxy = _proxy_failure(sock, hop)
    if proxy is not None:
        return proxy
    text = str(e)
    if "banner" in text and ("timed out" in text.lower() or "timeout" in text.lower()
                             or isinstance(getattr(e, "__cause__", None), socket.timeout) or "Error reading" in text):
        if "EOF" in text or "reset" in text.lower():
            why = "the server closed the connection before its SSH banner"
        else:
            why = f"timed out: no SSH banner within {hop.connect_timeout:g}s (ConnectTimeout)"
    else:
        why = _why(e)
    return ConnectError(f"SSH handshake with {hop.label} ({hop.address}) failed: {why}",
                        f"is an SSH server listening on port {hop.port}? (`ssh -v -p {hop.port} "
                        f"{hop.hostname}` shows the same exchange)")


def _proxy_failure(sock: paramiko.Channel | socket.socket, hop: ResolvedTarget) -> ConnectError | None:
    if not isinstance(sock, ProxySocket):
        return None
    report = sock.exit_report()
    if report is None:
        return None
    return ConnectError(f"ProxyCommand for {hop.label} {report}",
                        f"run it by hand to see why: {sock.command}")


def _lost_during_setup(hop: ResolvedTarget, e: BaseException) -> ConnectError:
    return ConnectError(f"connection to {hop.label} ({hop.address}) was lost while setting up: {_why(e)}",
                        "try again; if it persists, check the host's sshd logs and your network")


def _why(e: BaseException) -> str:
    text = str(e).strip()
    return text or type(e).__name__
