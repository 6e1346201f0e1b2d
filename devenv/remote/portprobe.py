"""Does a TCP service on the host answer? Asked over the host's own connection, with no process on the host.

A port the host publishes on its 127.0.0.1 (an environment's Jupyter or sshd) is reached through a direct-tcpip
channel on the SSH connection already open (one round trip, what `ssh -L` does for each connection), or with a
plain socket when the host is this machine. No login shell, no `docker exec`, nothing started on the host.

A connect alone proves nothing: Docker's userland proxy accepts a connection on a published port even when
nothing listens behind it in the container (and closes it a moment later). So each probe reads what the service
itself says: an HTTP status line and body, or an SSH banner.

This module imports no SSH library: SSHConnection.open_port and LocalConnection.open_port open the stream.
"""

from __future__ import annotations

import json
import time
from typing import Protocol

from devenv.errors import DevenvError

PROBE_TIMEOUT = 2.0


class Stream(Protocol):
    """What open_port gives: a socket, or a paramiko Channel (the same calls)."""

    def settimeout(self, timeout: float | None) -> None: ...

    def sendall(self, data: bytes) -> None: ...

    def recv(self, size: int) -> bytes: ...

    def close(self) -> None: ...


class CannotProbe(DevenvError):
    """This connection cannot reach the host's ports (sshd refuses TCP forwarding, or it is no SSH/local
    connection): the caller asks another way (a probe run on the host or in the environment)."""


class NotAnswering(Exception):
    """The port was reached (or refused) and the service did not answer as it should: the text says how."""


def _open(conn: object, port: int, host: str, timeout: float) -> Stream:
    opener = getattr(conn, "open_port", None)
    if opener is None:
        raise CannotProbe(f"{conn!r} cannot open ports on its host", "probe from the host instead")
    stream: Stream = opener(host, port, timeout)
    stream.settimeout(timeout)
    return stream


def _read_all(stream: Stream, limit: int, deadline: float, until: bytes | None = None) -> bytes:
    data = bytearray()
    while len(data) < limit:
        stream.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            chunk = stream.recv(limit - len(data))
        except TimeoutError:
            if data:
                break
            raise NotAnswering("no answer within the timeout") from None
        except (ConnectionResetError, BrokenPipeError):  # hung up on us: as closed
            break
        if not chunk:
            break
        data += chunk
        if until is not None and until in data:
            break
    return bytes(data)


def http_get(conn: object, port: int, path: str = "/", *, host: str = "127.0.0.1",
             timeout: float = PROBE_TIMEOUT) -> tuple[int, bytes]:
    """(status code, body) of GET path on host:port as the connection's host sees it. NotAnswering when the
    connection is refused or closed without an HTTP answer; CannotProbe when the port cannot be reached from
    this connection at all."""
    deadline = time.monotonic() + timeout
    stream = _open_or_refused(conn, port, host, timeout)
    try:
        try:
            stream.sendall(f"GET {path} HTTP/1.0\r\nHost: {host}:{port}\r\nUser-Agent: devenv-probe\r\n"
                           "Connection: close\r\n\r\n".encode())
        except (ConnectionResetError, BrokenPipeError):
            pass  # hung up before the request: what it said (nothing, most likely) is read below
        data = _read_all(stream, 1 << 16, deadline)
    except OSError as exc:
        raise NotAnswering(f"{type(exc).__name__}: {exc}") from None
    finally:
        stream.close()
    head, _, body = data.partition(b"\r\n\r\n")
    words = head.split(b" ", 2)
    if len(words) < 2 or not words[0].startswith(b"HTTP/") or not words[1].isdigit():
        raise NotAnswering("closed without an HTTP answer" if not data else f"not HTTP: {data[:40]!r}")
    return int(words[1]), body


def banner(conn: object, port: int, *, host: str = "127.0.0.1", timeout: float = PROBE_TIMEOUT,
           reply: bytes = b"") -> str:
    """The first line a server sends on connect (an sshd's "SSH-2.0-OpenSSH_9.2p1 ..."); NotAnswering if none.
    reply is sent back once the line came, before hanging up."""
    deadline = time.monotonic() + timeout
    stream = _open_or_refused(conn, port, host, timeout)
    try:
        data = _read_all(stream, 256, deadline, until=b"\n")
        if reply and data.startswith(b"SSH-"):
            try:
                stream.sendall(reply)
            except OSError:
                pass  # it hung up first: the banner is what counts
    except OSError as exc:
        raise NotAnswering(f"{type(exc).__name__}: {exc}") from None
    finally:
        stream.close()
    if not data:
        raise NotAnswering("closed without a banner")
    return data.split(b"\n", 1)[0].decode("ascii", "replace").strip()


def jupyter_version(conn: object, port: int, *, host: str = "127.0.0.1", timeout: float = PROBE_TIMEOUT) -> str:
    """"jupyter-server 2.14.2" when a Jupyter server answers /api on port (it does without a token)."""
    code, body = http_get(conn, port, "/api", host=host, timeout=timeout)
    if code != 200:
        raise NotAnswering(f"/api answered HTTP {code}")
    version = api_version(body)
    if version is None:
        raise NotAnswering("/api answered, but not as a Jupyter server")
    return f"jupyter-server {version}"


def api_version(body: bytes | str) -> str | None:
    """The version in the body of a Jupyter server's `GET /api` answer ({"version": "2.14.2"}); None for a body
    that is no such answer (another HTTP server on the port)."""
    try:
        version = json.loads(body).get("version")
    except (ValueError, AttributeError):
        return None
    return version if isinstance(version, str) else None


def sshd_banner(conn: object, port: int, *, host: str = "127.0.0.1", timeout: float = PROBE_TIMEOUT) -> str:
    # Our own identification line before hanging up: sshd then logs one "Connection closed by ... [preauth]"
    # instead of an error ("kex_exchange_identification: Connection closed by remote host") and that line.
    line = banner(conn, port, host=host, timeout=timeout, reply=b"SSH-2.0-devenv-probe\r\n")
    if not line.startswith("SSH-"):
        raise NotAnswering(f"unexpected banner {line[:40]!r}")
    return line


def _open_or_refused(conn: object, port: int, host: str, timeout: float) -> Stream:
    try:
        return _open(conn, port, host, timeout)
    except CannotProbe:
        raise
    except (ConnectionRefusedError, NotAnswering) as exc:
        raise NotAnswering(f"connection refused ({exc})" if str(exc) else "connection refused") from None
    except OSError as exc:
        raise NotAnswering(f"cannot connect: {type(exc).__name__}: {exc}") from None
