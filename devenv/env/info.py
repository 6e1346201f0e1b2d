"""What runtimes report (L0): images, containers and environments as plain data, free of any SDK type.

L1 runtimes build these from the Docker API or the host's state file; L2 services and front ends read them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from devenv.env import spec as envspec
from devenv.errors import DevenvError


@dataclass(frozen=True)
class ImageInfo:
    ref: str
    id: str
    size_bytes: int
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class StoredImage:
    """An image in a host's engine, as its image list shows it (tags empty: dangling, a rebuild took its tag)."""

    id: str
    tags: tuple[str, ...]
    size_bytes: int
    created: int                      # seconds since the epoch
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ContainerInfo:
    id: str
    name: str
    state: str                       # created | running | restarting | paused | exited | dead
    labels: dict[str, str]
    image_id: str
    host_ports: dict[int, int]       # container port -> published host port (running containers only)
    created: str = ""
    started_at: str = ""
    exit_code: int | None = None
    restart_count: int = 0
    ip: str = ""                     # the container's address on its Docker network, reachable from the host


@dataclass(frozen=True)
class ProgressEvent:
    """One step of a pull or build: `text` for logs; `current/total` bytes when a layer reports them."""
    text: str
    layer: str | None = None
    current: int | None = None
    total: int | None = None


@dataclass
class EnvStatus:
    """One environment as the host reports it: what `status` prints and `up` decides from."""
    host: str
    env: str
    owner: str
    runtime: str                     # docker | host
    state: str                       # running | stopped | created | absent | ...
    spec_hash: str | None = None
    spec: dict[str, Any] | None = None
    ports: dict[str, int] = field(default_factory=dict)   # service -> host port on the host's 127.0.0.1
    container: str | None = None     # container id (docker) or pid (host runtime)
    address: str = "127.0.0.1"       # where the environment's other ports are reached from the host
    name: str | None = None
    image_id: str | None = None
    created: str = ""
    started_at: str = ""
    detail: str = ""
    job_id: str | None = None        # a scheduler's job holding it (scheduler backends), else None
    nodes: list[str] = field(default_factory=list)   # the nodes it runs on, when not the host itself
    gpus: str | None = None          # the host GPUs it was given (label org.devenv.gpus), when recorded
    # what each service answered when `status` probed it ({"jupyter": "ok: jupyter-server 2.14.2",
    # "sshd": "down: closed without a banner"}); empty when not probed
    answers: dict[str, str] = field(default_factory=dict)
    # a scheduler job still waiting in its queue: Slurm's reason ("Resources") and its words, waited_s, its
    # position among the partition's pending jobs, how long `up` waits (limit_s), the estimated start
    queue: dict[str, Any] = field(default_factory=dict)
    # its autostop watcher's last word (services/environments/autostop.summary): state, idle_for_s, stops_in_s,
    # warning, reason, active/idle GPU-seconds; None where none was armed
    autostop: dict[str, Any] | None = None

    @property
    def running(self) -> bool:
        return self.state == "running"

    @property
    def not_answering(self) -> list[str]:
        """The probed services that did not answer (["sshd"]), in the order probed."""
        return [name for name, said in self.answers.items() if not said.startswith("ok")]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("spec", None)
        return data


def status_from_container(c: ContainerInfo, host: str) -> EnvStatus:
    """An EnvStatus from a labelled container (the labels carry env, owner and spec)."""
    ports = {}
    for service, container_port in envspec.CONTAINER_PORTS.items():
        if container_port in c.host_ports:
            ports[service] = c.host_ports[container_port]
    state = c.state
    detail = ""
    if state == "exited":
        detail = f"exit code {c.exit_code}"
    elif state == "restarting":
        detail = f"restarting (restarts: {c.restart_count})"
    return EnvStatus(
        host=host,
        env=c.labels.get(envspec.ENV, "?"),
        owner=c.labels.get(envspec.OWNER, "?"),
        runtime="docker",
        state=state,
        spec_hash=c.labels.get(envspec.SPEC_HASH),
        spec=envspec.spec_from_labels(c.labels),
        ports=ports,
        container=c.id,
        name=c.name,
        image_id=c.image_id,
        created=c.created,
        started_at=c.started_at,
        detail=detail,
        address=c.ip or "127.0.0.1",
        gpus=c.labels.get(envspec.GPUS),
    )


class PortInUse(DevenvError):
    """A host port the container should publish is taken (by another container or process)."""

    def __init__(self, port: int | None, detail: str):
        where = f"127.0.0.1:{port}" if port else "a preferred port"
        super().__init__(f"{where} is already in use on the host: {detail}",
                         "devenv picks a free port instead; set other ports in the environment profile to avoid this")
        self.port = port


class LimitRefused(DevenvError):
    """The host refuses a ulimit the container asked for (rootless or confined Docker)."""

    def __init__(self, name: str, detail: str):
        super().__init__(f"the host refuses ulimit {name} for containers: {detail}",
                         "devenv starts without it; raise dockerd's own limit (LimitMEMLOCK=infinity in its "
                         "systemd unit) for PyTorch's pinned memory")
        self.name = name


class BuildFailed(DevenvError):
    """An image build failed; names the Dockerfile step and shows the end of its output."""

    def __init__(self, step: str | None, error: str, tail: list[str]):
        where = f" at {step}" if step else ""
        message = f"image build failed{where}: {error.strip()}"
        if tail:
            message += "\n" + "\n".join(f"  | {line}" for line in tail)
        super().__init__(message, "fix the cause above (network, CA bundle, package versions) and run "
                                  "`devenv image build HOST` again; finished steps are cached")
        self.step = step
        self.error = error
