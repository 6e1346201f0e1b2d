"""The one place that knows which backend a host's `runtime:` is (L2): RuntimeKind -> backend class.

Adding a kind of environment: its folder here with a backend.py whose class subclasses
services.environments.contract.EnvironmentBackend, a RuntimeKind in config.profiles, and its register() line
below. A test joins the same way: `register("memory", MemoryBackend)`.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import replace

from devenv.config.profiles import HostProfile, RuntimeKind
from devenv.errors import ProfileError
from devenv.remote.base import Connection
from devenv.services.environments.contract import Check, EnvironmentBackend

BackendClass = type[EnvironmentBackend]

_BACKENDS: dict[str, BackendClass] = {}


def register(kind: RuntimeKind | str, backend: BackendClass) -> None:
    """Hosts with `runtime: kind` get backend (a later line for the same kind replaces the earlier)."""
    _BACKENDS[str(kind)] = backend


def _register_builtins() -> None:
    from devenv.services.environments.docker.backend import Provisioner
    from devenv.services.environments.host.backend import HostProvisioner
    from devenv.services.environments.slurm.backend import SlurmEnvironments

    register(RuntimeKind.DOCKER, Provisioner)            # a container of the host's Docker or podman
    register(RuntimeKind.HOST, HostProvisioner)          # the bare host
    register(RuntimeKind.SLURM, SlurmEnvironments)       # a Slurm job, from the cluster's login node


_register_builtins()

# `runtime: auto` (every host named by an ssh destination): the container runtime where the host has a docker
# (or podman) CLI, else the bare host. Asked once per connection: one `command -v` round trip.
_AUTO_PROBE = "command -v docker >/dev/null 2>&1 || command -v podman >/dev/null 2>&1"
_decided: weakref.WeakKeyDictionary[object, RuntimeKind] = weakref.WeakKeyDictionary()
_decided_lock = threading.Lock()


def settle(host: HostProfile, conn: Connection) -> HostProfile:
    """host with `auto` replaced by the kind this host supports (docker or host); other kinds as they are."""
    if host.runtime is not RuntimeKind.AUTO:
        return host
    with _decided_lock:
        kind = _decided.get(conn)
    if kind is None:
        kind = RuntimeKind.DOCKER if conn.run(_AUTO_PROBE, timeout=30).ok else RuntimeKind.HOST
        with _decided_lock:
            _decided[conn] = kind
    return replace(host, runtime=kind)


def known_backend(host: HostProfile) -> BackendClass | None:
    """The backend class of the host's kind when the profile says it; None for `auto` (known once connected)."""
    return None if host.runtime is RuntimeKind.AUTO else backend_class(host)


def backend_class(host: HostProfile) -> BackendClass:
    """The backend class of the host's kind (settle() an `auto` host first): what it answers before opening."""
    backend = _BACKENDS.get(str(host.runtime))
    if backend is None:
        hint = "use runtime: " + ", ".join(k.value for k in RuntimeKind)
        if host.runtime is RuntimeKind.AUTO:
            raise ProfileError(f"internal: {host.name}'s runtime `auto` was not decided before use", hint)
        raise ProfileError(f"{host.source}: unknown runtime '{host.runtime}'", hint)
    return backend


def open_backend(host: HostProfile, conn: Connection, check: Check | None = None) -> EnvironmentBackend:
    """The backend of the host's runtime on conn (`auto` decided here); check is the preflight of `up`."""
    host = settle(host, conn)
    return backend_class(host).open(host, conn, check)
