"""The one place that knows which backend a host's `runtime:` is (L2); every caller goes through open_backend.

Adding a kind of environment: a module with a class implementing services.environments.contract.EnvironmentBackend (its
`traits`, and an `open(host, conn, check)` that wraps the connection in its runtime), a RuntimeKind in
config.profiles, and its line in _BACKENDS below.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import replace
from typing import Protocol

from devenv.config.profiles import HostProfile, RuntimeKind
from devenv.errors import ProfileError
from devenv.remote.base import Connection
from devenv.services.environments.contract import Check, EnvironmentBackend, Traits
from devenv.services.environments.docker.backend import Provisioner
from devenv.services.environments.host.backend import HostProvisioner
from devenv.services.environments.slurm.backend import SlurmEnvironments


class BackendClass(Protocol):
    """What the registry needs of a backend's class: its traits, and how it opens on a host's connection."""

    traits: Traits

    def open(self, host: HostProfile, conn: Connection, check: Check | None = None) -> EnvironmentBackend: ...


_BACKENDS: dict[RuntimeKind, BackendClass] = {
    RuntimeKind.DOCKER: Provisioner,            # a container of the host's Docker or podman
    RuntimeKind.HOST: HostProvisioner,          # the bare host
    RuntimeKind.SLURM: SlurmEnvironments,       # a Slurm job, from the cluster's login node
}

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


def known_traits(host: HostProfile) -> Traits | None:
    """The traits of the host's kind when the profile says it; None for `auto` (known once connected)."""
    return None if host.runtime is RuntimeKind.AUTO else traits_of(host)


def on_cluster(host: HostProfile) -> bool:
    """Does the profile name a cluster whose environments are scheduler jobs (`auto` never is one)?"""
    traits = known_traits(host)
    return traits is not None and traits.scheduled


def traits_of(host: HostProfile) -> Traits:
    """What the host's kind of environment is like (settle() an `auto` host first)."""
    return _backend(host).traits


def open_backend(host: HostProfile, conn: Connection, check: Check | None = None) -> EnvironmentBackend:
    """The backend of the host's runtime on conn (`auto` decided here); check is the preflight of `up`."""
    host = settle(host, conn)
    return _backend(host).open(host, conn, check)


def register(kind: RuntimeKind | str, backend: BackendClass) -> None:
    """backend (a class with `traits` and `open(host, conn, check)`) serves the hosts of `runtime: kind` from
    now on, in this process: how a backend that lives outside devenv (the tests' in-memory one) joins."""
    _BACKENDS[RuntimeKind(kind)] = backend


def _backend(host: HostProfile) -> BackendClass:
    backend = _BACKENDS.get(host.runtime)
    if backend is None:
        hint = "use runtime: " + ", ".join(k.value for k in RuntimeKind)
        if host.runtime is RuntimeKind.AUTO:
            raise ProfileError(f"internal: {host.name}'s runtime `auto` was not decided before use", hint)
        raise ProfileError(f"{host.source}: unknown runtime '{host.runtime}'", hint)
    return backend
