"""Pick the runtime a host profile asks for (L1), on an open connection."""

from __future__ import annotations

from devenv.config.profiles import HostProfile
from devenv.errors import ProfileError
from devenv.remote.base import Connection


def open_runtime(host: HostProfile, conn: Connection):
    """DockerRuntime for `runtime: docker`, HostRuntime for `runtime: host`."""
    if host.runtime == "docker":
        from devenv.runtimes.docker_runtime import DockerRuntime

        return DockerRuntime.connect(conn, host.name, host.local, host.engine, host.gpu_devices)
    if host.runtime == "host":
        from devenv.runtimes.host_runtime import HostRuntime

        return HostRuntime(conn, host)
    raise ProfileError(f"{host.source}: unknown runtime '{host.runtime}'", "use runtime: docker or runtime: host")
