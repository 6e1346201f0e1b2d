"""One connection per host per process, shared by every thread (checks run in parallel over one transport).

A pooled SSHConnection whose transport died reconnects by itself on its next command.

devenv.remote.ssh (and with it paramiko and cryptography, ~0.3 s of CPU per process) is imported only when an
SSH host is really dialled: a command against `local` hosts (the in-memory backend's, a laptop's) never pays for
it (tests/test_cli_lazy.py).
"""

from __future__ import annotations

import atexit
import threading
from typing import TYPE_CHECKING

from devenv.errors import ConnectError
from devenv.remote.base import Connection
from devenv.remote.local import LocalConnection

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
        elif accept_new_host and not isinstance(conn, LocalConnection):
            conn.accept_new_host = True  # type: ignore[attr-defined]  # an SSHConnection (the pool holds only these two)
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
    from devenv.remote.ssh import SSHConnection  # paramiko: only for a host really dialled over SSH

    return SSHConnection(host.ssh, name=host.name, accept_new_host=accept_new_host)


atexit.register(close_all)
