"""One connection per host per process, shared by every thread (checks run in parallel over one transport).

A pooled SSHConnection whose transport died reconnects by itself on its next command.
"""

from __future__ import annotations

import atexit
import threading
from typing import TYPE_CHECKING

from devenv.errors import ConnectError
from devenv.remote.base import Connection
from devenv.remote.local import LocalConnection
from devenv.remote.ssh import SSHConnection

if TYPE_CHECKING:  # a host profile, for its type only
    from devenv.config.profiles import HostProfile, SSHTarget

_pool: dict[tuple[str, bool, SSHTarget | None], Connection] = {}
_lock = threading.Lock()


def get_connection(host: HostProfile, *, accept_new_host: bool = False) -> Connection:
    """The pooled connection for a devenv.config.profiles.HostProfile (LocalConnection for a `local` host).

    accept_new_host=True lets the connection record an unknown host key (never a changed one)."""
    key = (host.name, host.local, host.ssh)
    with _lock:
        conn = _pool.get(key)
        if conn is None:
            conn = _new_connection(host, accept_new_host)
            _pool[key] = conn
        elif accept_new_host and isinstance(conn, SSHConnection):
            conn.accept_new_host = True
        return conn


def new_connection(host: HostProfile, *, accept_new_host: bool = False) -> Connection:
    """A connection of its own for host, outside the pool (closing it affects no one else): for a monitor
    stream per Slurm node, each ending with its own connection."""
    return _new_connection(host, accept_new_host)


def close_all() -> None:
    with _lock:
        conns = list(_pool.values())
        _pool.clear()
    for conn in conns:
        conn.close()


def _new_connection(host: HostProfile, accept_new_host: bool) -> Connection:
    if host.local:
        return LocalConnection(host.name)
    if host.ssh is None:
        raise ConnectError(f"host profile '{host.name}' has no ssh section and is not local",
                           f"add ssh: {{hostname: ...}} to the profile (see `devenv profiles show {host.name}`)")
    return SSHConnection(host.ssh, name=host.name, accept_new_host=accept_new_host)


atexit.register(close_all)
