"""A container runtime kept in memory: the DockerRuntime methods the docker backend calls, with no engine.

For the fast tests of `up`'s decisions (tests/test_up_decisions.py): every call is recorded in `calls`, so a
test can say what `up` did and did not do. It is a stand-in for the engine only; the backend, the specs, the
labels and the waits under test are the real ones.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from devenv.env.info import ContainerInfo, ImageInfo, PortInUse
from devenv.env.spec import CONTAINER_PORTS, ContainerRequest

HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMemoryRuntimeHostKeyOfTheEnvironment0000"


class MemoryRuntime:
    kind = "docker"
    commit_builds = False   # builds the whole Dockerfile (DockerRuntime.build_by_commit is Docker's alone)

    def __init__(self, host: str = "memhost", images: dict[str, str] | None = None):
        self.host = host
        self.images = dict(images or {})            # ref -> image id
        self.image_labels: dict[str, dict[str, str]] = {}
        self.exec_users: list[str] = []             # the user of each exec_stream ("" : the image's, root)
        self.containers: dict[str, ContainerInfo] = {}
        self.files: dict[tuple[str, str], bytes] = {}
        self.volumes: dict[str, dict[str, str]] = {}
        self.networks: dict[str, dict[str, str]] = {}
        self.calls: list[str] = []
        self.taken_ports: set[int] = set()          # host ports something else holds
        self.dead: set[str] = set()                 # services that do not answer in running containers
        self.sshd_comes_back = True                 # starting sshd again inside brings it back
        self.slow: dict[str, int] = {}              # service -> readiness probes it stays down for (starting)
        self._ids = itertools.count(1)
        self._free_ports = itertools.count(40000)

    # --- what a test arranges ------------------------------------------------------------------------

    def add_container(self, name: str, state: str, labels: dict[str, str], image_id: str = "sha256:img") -> str:
        cid = f"c{next(self._ids)}"
        ports = {CONTAINER_PORTS["jupyter"]: 18888, CONTAINER_PORTS["ssh"]: 12222} if state == "running" else {}
        self.containers[cid] = ContainerInfo(cid, name, state, dict(labels), image_id, ports)
        return cid

    def did(self, verb: str) -> list[str]:
        return [c for c in self.calls if c.split(" ", 1)[0] == verb]

    # --- the runtime's interface -----------------------------------------------------------------------

    def close(self) -> None:
        self.calls.append("close")

    def image(self, ref: str) -> ImageInfo | None:
        self.calls.append(f"image {ref}")
        if ref not in self.images:
            return None
        return ImageInfo(ref, self.images[ref], 1 << 30, dict(self.image_labels.get(ref, {})))

    def build(self, context, dockerfile: str, tag: str, buildargs: dict[str, str], progress,
              labels: dict[str, str] | None = None, target: str | None = None) -> ImageInfo:
        self.calls.append(f"build {tag}")
        self.images[tag] = f"sha256:built-{len(self.did('build'))}-{tag}"
        self.image_labels[tag] = dict(labels or {})
        self.build_args = dict(buildargs)
        return self.image(tag)  # type: ignore[return-value]

    def pull(self, ref: str, progress) -> ImageInfo:
        self.calls.append(f"pull {ref}")
        self.images[ref] = f"sha256:pulled-{ref}"
        return ImageInfo(ref, self.images[ref], 1 << 30)

    def ensure_volume(self, name: str, labels: dict[str, str]) -> bool:
        self.calls.append(f"ensure_volume {name}")
        if name in self.volumes:
            return False
        self.volumes[name] = dict(labels)
        return True

    def list_volumes(self, label_filters: dict[str, str]) -> list[str]:
        return [n for n, labels in self.volumes.items() if all(labels.get(k) == v for k, v in label_filters.items())]

    def remove_volume(self, name: str) -> bool:
        self.calls.append(f"remove_volume {name}")
        return self.volumes.pop(name, None) is not None

    def ensure_network(self, name: str, labels: dict[str, str]) -> bool:
        self.calls.append(f"ensure_network {name}")
        if name in self.networks:
            return False
        self.networks[name] = dict(labels)
        return True

    def list_networks(self, label_filters: dict[str, str]) -> list[str]:
        return [n for n, labels in self.networks.items()
                if all(labels.get(k) == v for k, v in label_filters.items())]

    def remove_network(self, name: str) -> bool:
        self.calls.append(f"remove_network {name}")
        return self.networks.pop(name, None) is not None

    def find(self, name_or_id: str) -> ContainerInfo | None:
        for c in self.containers.values():
            if name_or_id in (c.id, c.name):
                return c
        return None

    def list_managed(self, label_filters: dict[str, str]) -> list[ContainerInfo]:
        return [c for c in self.containers.values()
                if all(c.labels.get(k) == v for k, v in label_filters.items())]

    def create(self, req: ContainerRequest) -> str:
        self.calls.append(f"create {req.name}")
        cid = f"c{next(self._ids)}"
        self.containers[cid] = ContainerInfo(cid, req.name, "created", dict(req.labels), req.image, {})
        self._requested = getattr(self, "_requested", {})
        self._requested[cid] = req
        return cid

    def put_files(self, container: str, files: list[tuple[str, bytes, int]]) -> None:
        self.calls.append(f"put_files {container} {' '.join(path for path, _, _ in files)}")
        for path, data, _mode in files:
            self.files[(container, path)] = data

    def read_file(self, container: str, path: str) -> bytes | None:
        self.calls.append(f"read_file {container} {path}")
        if path.endswith("ssh_host_ed25519_key.pub") and self.containers[container].state == "running":
            return (HOST_KEY + " root@env\n").encode()
        return self.files.get((container, path))

    def start(self, container: str) -> None:
        self.calls.append(f"start {container}")
        c = self.containers[container]
        req = getattr(self, "_requested", {}).get(container)
        ports: dict[int, int] = {}
        for cport, preferred in (req.ports.items() if req else
                                 [(p, None) for p in (CONTAINER_PORTS["jupyter"], CONTAINER_PORTS["ssh"])]):
            if preferred is not None and preferred in self.taken_ports:
                raise PortInUse(preferred, "bind: address already in use")
            ports[cport] = preferred if preferred is not None else next(self._free_ports)
        self.containers[container] = ContainerInfo(c.id, c.name, "running", c.labels, c.image_id, ports)
        self.dead.clear()  # a fresh start of the container starts every service

    def stop(self, container: str, timeout: int = 10) -> None:
        self.calls.append(f"stop {container}")
        c = self.containers[container]
        self.containers[container] = ContainerInfo(c.id, c.name, "exited", c.labels, c.image_id, {}, exit_code=0)

    def remove(self, container: str) -> None:
        self.calls.append(f"remove {container}")
        self.containers.pop(container, None)

    def exec(self, container: str, argv: list[str]) -> tuple[int, str, str]:
        self.calls.append(f"exec {container} {' '.join(argv)}")
        if argv[:1] == ["devenv-ready"]:
            starting = {s for s in argv[1:] if self.slow.get(s, 0) > 0}
            for s in starting:
                self.slow[s] -= 1
            down = (self.dead | starting) & set(argv[1:])
            lines = [f"{s} down: not yet" if s in down else f"{s} ok" for s in argv[1:]]
            return (1 if down else 0), "\n".join(lines), ""
        if argv[:2] == ["sh", "-c"] and "sshd -D" in argv[2] and self.sshd_comes_back:
            self.dead.discard("sshd")
        return 0, "", ""

    def exec_stream(self, container: str, argv: list[str], tty: bool = False, user: str = ""):
        self.exec_users.append(user)
        code, out, err = self.exec(container, argv)
        return iter([(out.encode(), err.encode())]), (lambda: code)

    def logs(self, container: str, tail: int | str = 100, follow: bool = False) -> Iterator[str]:
        return iter(["memory runtime: no log"])
