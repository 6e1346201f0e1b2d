"""Pick the runtime a host profile asks for (L1), on an open connection."""

from __future__ import annotations

import threading
import weakref
from dataclasses import replace

from devenv.config.profiles import HostProfile
from devenv.errors import ProfileError
from devenv.remote.base import Connection

# `runtime: auto` (every host named by an ssh destination): the container runtime where the host has a docker
# (or podman) CLI, else the bare host. Asked once per connection: one `command -v` round trip.
_decided: weakref.WeakKeyDictionary[object, str] = weakref.WeakKeyDictionary()
_decided_lock = threading.Lock()


def settle(host: HostProfile, conn: Connection) -> HostProfile:
    """host with `auto` replaced by the runtime this host supports (docker or host)."""
    if host.runtime != "auto":
        return host
    with _decided_lock:
        runtime = _decided.get(conn)
    if runtime is None:
        has_docker = conn.run("command -v docker >/dev/null 2>&1 || command -v podman >/dev/null 2>&1",
                              timeout=30).ok
        runtime = "docker" if has_docker else "host"
        with _decided_lock:
            _decided[conn] = runtime
    return replace(host, runtime=runtime)


def open_runtime(host: HostProfile, conn: Connection):
    """DockerRuntime for `runtime: docker`, HostRuntime for `runtime: host` (`auto` decided here)."""
    host = settle(host, conn)
    if host.runtime == "docker":
        from devenv.runtimes.docker_runtime import DockerRuntime

        return DockerRuntime.connect(conn, host.name, host.local, host.engine, host.gpu_devices)
    if host.runtime == "host":
        from devenv.runtimes.host_runtime import HostRuntime

        return HostRuntime(conn, host)
    raise ProfileError(f"{host.source}: unknown runtime '{host.runtime}'", "use runtime: docker, host or auto")
