"""Where `devenv sanity` runs, for the command and the monitor's sanity key alike: inside the environment's
container on a Docker host (unless on_host), else on the host itself; with the host's own connection kept, so
the run's GPUs can be watched from the host (devenv.services.gpu_occupancy)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

from devenv.cli.common import resolve_env
from devenv.remote.base import Connection


@dataclass
class SanityTarget:
    conn: Connection                 # where the program runs
    python: str                      # its default interpreter
    where: str                       # for people: "environment 'cuda'" / "host python python3"
    host_conn: Connection            # the GPU host itself (watching its GPUs)
    container: str | None = None     # the environment's container id, when it runs in one
    among: list[int] | None = None   # the host GPUs the environment has (None: all, or unknown)


@contextlib.contextmanager
def sanity_target(host_profile, conn: Connection, env_flag: str | None, on_host: bool,
                  host_if_no_env: bool = False) -> Iterator[SanityTarget]:
    """host_if_no_env: on a Docker host without a running environment, run on the host instead of refusing
    (the monitor's key; `devenv sanity` refuses and says how to start one, or to pass --on-host)."""
    from devenv.runtimes.factory import settle

    host_profile = settle(host_profile, conn)  # `runtime: auto`: docker if the host has it
    if host_profile.runtime != "docker" or on_host:
        yield SanityTarget(conn, host_profile.python, f"host python {host_profile.python}", conn)
        return
    from devenv.cli.envcommon import open_provisioner
    from devenv.gpu import choose as gpu_choose
    from devenv.services.env_connection import ContainerConnection

    env_profile = resolve_env(host_profile, env_flag)
    with open_provisioner(host_profile, conn, with_key=False) as (prov, _):
        status = prov.find(env_profile.name)
        if host_if_no_env and (status is None or not status.running):
            yield SanityTarget(conn, host_profile.python,
                               f"host python {host_profile.python}, no environment running", conn)
            return
        container = prov.running_container_of(env_profile.name)
        labels_gpus = (status.gpus if status is not None else None) or ""
        spec_gpus = str(((status.spec if status else None) or {}).get("gpus") or "")
        among = gpu_choose.indices_of(labels_gpus) if labels_gpus else None
        if among is None and spec_gpus and not spec_gpus.startswith(gpu_choose.FREE_PREFIX):
            among = gpu_choose.indices_of(spec_gpus)
        yield SanityTarget(ContainerConnection(prov.runtime, container, host_profile.name), "python3",
                           f"environment '{env_profile.name}'", conn, container, among)
