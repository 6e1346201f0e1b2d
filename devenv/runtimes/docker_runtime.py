"""L1: the container operations environments need, as plain data in and out (no SDK type leaves this module).

One runtime for Docker and podman: both speak the Docker API. The one place they part is creating a container
with GPUs (see devenv.env.engines): podman's containers are created through podman's own API, with CDI devices.

Every docker-py error becomes a DevenvError with a hint; a port that cannot be published becomes PortInUse
so the service can pick a free one.
"""

from __future__ import annotations

import hashlib
import io
import logging
import re
import secrets
import shlex
import tarfile
import time
from collections.abc import Callable, Iterator
from typing import IO, Any, Literal, ParamSpec, TypeVar

# isort: off
# docker imports paramiko (for ssh:// hosts): let it find the one imported without invoke (remote.sshlib)
from devenv.remote import sshlib as _sshlib  # noqa: F401
# isort: on
import docker
import docker.errors
import requests
from docker.types import DeviceRequest, Mount, Ulimit

from devenv.env import engines
from devenv.env import spec as envspec
from devenv.env.engines import EngineInfo
from devenv.env.info import (
    BuildFailed,
    ContainerInfo,
    ImageInfo,
    LimitRefused,
    PortInUse,
    ProgressEvent,
    StoredImage,
)
from devenv.errors import ConnectError, DevenvError
from devenv.remote.base import Connection
from devenv.runtimes import docker_api

Progress = Callable[[ProgressEvent], None]
Json = dict[str, Any]  # what the engine's API answers (inspect, list, events)
_P = ParamSpec("_P")
_T = TypeVar("_T")
# APIError is an OSError too (via requests' HTTPError): every handler catches APIError before these.
_NETWORK_ERRORS = (requests.exceptions.ConnectionError, ConnectionError, EOFError, OSError)
_PORT_TAKEN = re.compile(r"(?:Bind for [\d.]+:(\d+) failed: port is already allocated|"
                         r"listen tcp4? [\d.]+:(\d+): bind: address already in use)")
# The classic builder's bookkeeping lines: not what a user reads to see why a step failed.
_BUILD_NOISE = re.compile(r"^\s*(\[\d+/\d+\] )?(---> |--> |COMMIT |Removing intermediate container |"
                          r"Successfully built |Successfully tagged )")
# Docker's classic builder says "Step 3/16 : RUN ...", podman's buildah "[2/3] STEP 3/16: RUN ...".
_BUILD_STEP = re.compile(r"^(\[\d+/\d+\] )?(Step|STEP) \d+/\d+")
# build_by_commit's containers: no environment's name starts so (theirs are devenv-OWNER-ENV-DIGEST)
BUILD_CONTAINER = "devenv.build."
_RLIM_INFINITY = 2**64 - 1  # podman's API wants the unsigned value where Docker takes -1
CREATE_TIMEOUT = 900  # seconds for podman's create (see _create_podman)
_RLIMIT_REFUSED = re.compile(r"error setting rlimit type (\d+)")
# Linux RLIMIT_* numbers as runc reports them.
_RLIMIT_NAMES = {3: "stack", 6: "nproc", 7: "nofile", 8: "memlock"}
# crun (Fedora/RHEL podman's runtime) names the limit: "crun: setrlimit `RLIMIT_NOFILE`: Operation not permitted"
_CRUN_RLIMIT_REFUSED = re.compile(r"setrlimit `RLIMIT_([A-Z]+)`")


_log = logging.getLogger(__name__)  # every Docker API call and its duration, for `devenv -v`

class DockerRuntime:
    """Containers, images and volumes on one host's container engine (Docker or podman)."""

    kind = "docker"

    def __init__(self, client: docker.DockerClient, host_name: str,
                 engine: EngineInfo | None = None, gpu_devices: str = "auto", conn: Connection | None = None):
        self.conn = conn  # the SSH connection under the API (None: a local socket), asked why it was lost
        self.client = client
        self.api = client.api
        self.host = host_name
        self.engine = engine or EngineInfo("docker", "?", "?")
        self._slirp: bool | None = None  # podman's slirp4netns is installed (asked once)
        self.gpu_request = engines.gpu_request_kind(self.engine.name, gpu_devices)

    @property
    def commit_builds(self) -> bool:
        """build_by_commit makes what a Dockerfile's COPY between stages would (Docker's commit keeps the image's
        config as given); podman builds with buildah, the classic way."""
        return self.engine.name == "docker"

    @classmethod
    def connect(cls, conn: Connection, host_name: str, local: bool, engine: str = "auto",
                gpu_devices: str = "auto", docker_socket: str | None = None) -> DockerRuntime:
        client, info = docker_api.client_for(conn, local, engine, socket_path=docker_socket)
        return cls(client, host_name, info, gpu_devices, None if local else conn)

    def close(self) -> None:
        try:
            self.api.close()
        except Exception:  # closing pooled channels of a dead connection may raise; nothing to save
            pass

    # --- images --------------------------------------------------------------------------------------

    def image(self, ref: str) -> ImageInfo | None:
        try:
            data = self._call(self.api.inspect_image, ref)
        except docker.errors.ImageNotFound:
            return None
        return _image_info(ref, data)

    def images_labelled(self, label: str) -> list[StoredImage]:
        """Every top-level image carrying label (any value), tagged or dangling."""
        data = self._call(self.api.images, filters={"label": label})
        found = []
        for item in data or []:
            labels = dict(item.get("Labels") or {})
            if label not in labels:   # checked here too: an engine that ignores the filter lists everything
                continue
            tags = tuple(t for t in item.get("RepoTags") or [] if t and not t.startswith("<none>"))
            found.append(StoredImage(id=_digest(str(item.get("Id", ""))), tags=tags,
                                     size_bytes=int(item.get("Size") or 0), created=int(item.get("Created") or 0),
                                     labels=labels))
        return found

    def images_in_use(self) -> dict[str, list[str]]:
        """Image id -> the names of the containers made from it (any state: a stopped container needs its
        image as much as a running one)."""
        used: dict[str, list[str]] = {}
        for item in self._call(self.api.containers, all=True) or []:
            names = [n.lstrip("/") for n in item.get("Names") or []] or [str(item.get("Id", ""))[:12]]
            used.setdefault(_digest(str(item.get("ImageID", ""))), []).extend(names)
        return used

    def remove_image(self, image_id: str) -> None:
        """Remove one image by id (never forced: the engine refuses one still used, tagged elsewhere or with
        child images, and that refusal is raised as a DevenvError saying why)."""
        try:
            self._call(self.api.remove_image, image_id, force=False, noprune=False)
        except docker.errors.NotFound:
            pass   # gone already (another prune): what was asked is true

    def pull(self, ref: str, progress: Progress) -> ImageInfo:
        repo, tag = _split_ref(ref)
        try:
            for event in self.api.pull(repo, tag=tag, stream=True, decode=True):
                if "error" in event:
                    raise DevenvError(f"cannot pull {ref} on {self.host}: {event['error']}",
                                      "check the image name, the host's registry access (docker login) and its "
                                      "network; or give the environment a build: section to build it there")
                progress(_pull_event(event))
        except docker.errors.NotFound as exc:
            raise DevenvError(f"image {ref} not found in its registry: {_explain(exc)}",
                              "check the image name and tag in the environment profile") from None
        except docker.errors.APIError as exc:
            raise DevenvError(f"cannot pull {ref} on {self.host}: {_explain(exc)}",
                              "check the host's network and registry access, or build the image (devenv image "
                              "build HOST)") from None
        except _NETWORK_ERRORS as exc:
            raise self._lost("pulling " + ref, exc) from None
        info = self.image(ref)
        if info is None:
            raise DevenvError(f"pull of {ref} finished but the image is not on {self.host}", "run the command again")
        return info

    def build(self, context: IO[bytes], dockerfile: str, tag: str | None, buildargs: dict[str, str],
              progress: Progress, labels: dict[str, str] | None = None, target: str | None = None) -> ImageInfo:
        """Build from a tar context (a file object) with the classic builder; BuildFailed names the step.
        tag None: an untagged image (a stage that a later step builds on), known by its id."""
        step: str | None = None
        tail: list[str] = []
        image_id = None
        try:
            stream = self.api.build(fileobj=context, custom_context=True, dockerfile=dockerfile, tag=tag,
                                    buildargs=buildargs, labels=labels, rm=True, forcerm=True, decode=True,
                                    pull=False, timeout=None, target=target)
            for event in stream:
                if "error" in event:
                    raise BuildFailed(step, event["error"], tail[-15:])
                if "aux" in event and isinstance(event["aux"], dict) and "ID" in event["aux"]:
                    image_id = event["aux"]["ID"]
                text = event.get("stream") or event.get("status") or ""
                for line in text.splitlines():
                    line = line.rstrip()
                    if not line or _BUILD_NOISE.match(line):
                        continue
                    if _BUILD_STEP.match(line):
                        step = line
                        tail = []
                    else:
                        tail.append(line)
                    progress(ProgressEvent(line))
        except docker.errors.APIError as exc:
            raise BuildFailed(step, _explain(exc), tail[-15:]) from None
        except _NETWORK_ERRORS as exc:
            raise self._lost(f"building {tag or target}", exc) from None
        info = self.image(tag or image_id or "")   # "": no image (inspect of "" finds none)
        if info is None or (image_id and _digest(info.id) != _digest(image_id)):
            raise DevenvError(f"the build of {tag or target} ended without an image", "run `devenv image build` again")
        return info

    def build_by_commit(self, image_id: str, files: IO[bytes], command: list[str], tag: str, labels: dict[str, str],
                        progress: Progress, step: str) -> ImageInfo:
        """tag = image_id + what command does in a container of it, committed (Docker only): files (a tar) are put
        under /tmp first; the command's output is the build's progress; its exit code is checked (BuildFailed
        with the output's end); the image keeps image_id's entrypoint, cmd, env, user and workdir (the
        container's own entrypoint is not committed), with labels added. The container is removed whatever
        happens (an error, a signal): nothing half-made stays."""
        config = self._call(self.api.inspect_image, image_id).get("Config") or {}
        container: str | None = None
        tail: list[str] = []
        progress(ProgressEvent(step))
        try:
            self._remove_left_builds(tag)
            # no env, labels or user of its own: the committed image would inherit them (a name is not committed)
            name = build_container_prefix(tag) + secrets.token_hex(6)
            container = str(self._call(self.api.create_container, image_id, command=command[1:],
                                       entrypoint=command[:1], name=name)["Id"])
            if not self._put_archive(container, "/tmp", files):
                raise DevenvError(f"cannot put the build's files into a container on {self.host}",
                                  "run `devenv image build` again")
            self._call(self.api.start, container)
            pending = b""
            for chunk in self.api.logs(container, stream=True, follow=True):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for raw in lines:
                    line = raw.decode(errors="replace").rstrip()
                    if line:
                        tail = [*tail[-14:], line]
                        progress(ProgressEvent(line))
            if pending.strip():
                tail = [*tail[-14:], pending.decode(errors="replace").rstrip()]
            code = int((self._call(self.api.wait, container) or {}).get("StatusCode", -1))
            if code != 0:
                raise BuildFailed(step, f"exit code {code}", tail)
            conf = {key: config.get(key) for key in ("Entrypoint", "Cmd", "Env", "User", "WorkingDir",
                                                     "ExposedPorts", "Volumes", "StopSignal")}
            conf["Labels"] = {**(config.get("Labels") or {}), **labels}
            repo, ref_tag = _split_ref(tag)
            self._call(self.api.commit, container, repository=repo, tag=ref_tag, conf=conf)
        except docker.errors.APIError as exc:
            raise BuildFailed(step, _explain(exc), tail) from None
        except _NETWORK_ERRORS as exc:
            raise self._lost(f"building {tag}", exc) from None
        finally:
            if container is not None:
                self._remove_quietly(container)
        info = self.image(tag)
        if info is None:
            raise DevenvError(f"the build of {tag} ended without an image", "run `devenv image build` again")
        return info

    def _remove_left_builds(self, tag: str) -> None:
        """Build containers of this same image that a lost connection left (the finally below could not reach
        the engine), once they have ended: one still running may be another build's. Another image's are left
        alone: an ended one may be that build's between its run and its commit (two builds at once on a host)."""
        prefix = build_container_prefix(tag)
        ended = self._call(self.api.containers, all=True,
                           filters={"name": prefix, "status": ["created", "exited", "dead"]})
        for item in ended or []:
            if any(n.lstrip("/").startswith(prefix) for n in item.get("Names") or []):
                self._remove_quietly(str(item["Id"]))

    def _remove_quietly(self, container: str) -> None:
        """Remove a build's container, running or not; a failure to (the connection lost) is logged, not raised
        over the error that brought us here."""
        try:
            self.api.remove_container(container, force=True)
        except Exception as exc:  # noqa: BLE001  # not only APIError/network: a dead channel surfaced as urllib3's AttributeError
            _log.warning("could not remove the build container %s on %s: %s", container[:12], self.host, exc)

    def tag_image(self, image_id: str, ref: str) -> ImageInfo:
        repo, tag = _split_ref(ref)
        self._call(self.api.tag, image_id, repo, tag, force=True)
        info = self.image(ref)
        if info is None:
            raise DevenvError(f"cannot tag {image_id[:19]} as {ref} on {self.host}", "run the command again")
        return info

    # --- volumes -------------------------------------------------------------------------------------

    def ensure_volume(self, name: str, labels: dict[str, str]) -> bool:
        """Create the volume unless it exists; True when it was created."""
        if self.volume_exists(name):
            return False
        self._call(self.api.create_volume, name, labels=labels)
        return True

    def volume_exists(self, name: str) -> bool:
        try:
            self._call(self.api.inspect_volume, name)
            return True
        except docker.errors.NotFound:
            return False

    def remove_volume(self, name: str) -> bool:
        try:
            self._call(self.api.remove_volume, name)
            return True
        except docker.errors.NotFound:
            return False

    def list_volumes(self, label_filters: dict[str, str]) -> list[str]:
        filters = {"label": [f"{k}={v}" for k, v in label_filters.items()]}
        data = self._call(self.api.volumes, filters=filters)
        # Checked here too: podman 4.3 ORs several label filters on volumes (seen: `down --purge` of one
        # environment listed every devenv volume on the host).
        return sorted(v["Name"] for v in (data or {}).get("Volumes") or []
                      if _labels_match(v.get("Labels"), label_filters))

    # --- networks ------------------------------------------------------------------------------------

    def bridgeless_network(self) -> str | None:
        """envspec.NETWORK_SLIRP on podman with slirp4netns installed, else None (the environment gets a bridge
        network of its own: on Docker that keeps siblings out; on podman's CNI it does not)."""
        if self.engine.name != "podman":
            return None
        if self._slirp is None:
            try:
                # docker-py's private request helpers (its stubs leave them out): the libpod API is not in the SDK
                response = self.api._get(f"{self.api.base_url}/v4.0.0/libpod/info", timeout=30)  # type: ignore[attr-defined]
                info = self.api._result(response, json=True)  # type: ignore[attr-defined]
                self._slirp = bool(((info.get("host") or {}).get("slirp4netns") or {}).get("executable"))
            except (docker.errors.APIError, *_NETWORK_ERRORS, ValueError, AttributeError):
                self._slirp = False
        return envspec.NETWORK_SLIRP if self._slirp else None

    def ensure_network(self, name: str, labels: dict[str, str]) -> bool:
        """Create the bridge network unless one of that name exists; True when it was created. One of that
        name that is not labelled as asked is refused (it is someone else's)."""
        existing = self._network(name)
        if existing is not None:
            identity = {k: v for k, v in labels.items() if k in (envspec.MANAGED, envspec.OWNER, envspec.ENV)}
            if not _labels_match(existing.get("Labels"), identity):
                raise DevenvError(f"a network named {name} exists on {self.host} but is not this environment's",
                                  f"remove it (docker network rm {name}) or set DEVENV_OWNER to use other names")
            return False
        # check_duplicate: two `up`s racing must not make two networks of one name (Docker allows that)
        self._call(self.api.create_network, name, driver="bridge", labels=labels, check_duplicate=True)
        return True

    def list_networks(self, label_filters: dict[str, str]) -> list[str]:
        filters = {"label": [f"{k}={v}" for k, v in label_filters.items()]}
        data = self._call(self.api.networks, filters=filters)
        return sorted(n["Name"] for n in data or [] if _labels_match(n.get("Labels"), label_filters))

    def remove_network(self, name: str) -> bool:
        try:
            self._call(self.api.remove_network, name)
            return True
        except docker.errors.NotFound:
            return False

    def _network(self, name: str) -> Json | None:
        try:
            data = self._call(self.api.inspect_network, name)
        except docker.errors.NotFound:
            return None
        return data if isinstance(data, dict) and data.get("Name") == name else None  # not an id prefix

    # --- containers ----------------------------------------------------------------------------------

    def find(self, name_or_id: str) -> ContainerInfo | None:
        try:
            data = self._call(self.api.inspect_container, name_or_id)
        except docker.errors.NotFound:
            return None
        return _container_info(data)

    def list_managed(self, label_filters: dict[str, str]) -> list[ContainerInfo]:
        filters = {"label": [f"{k}={v}" for k, v in label_filters.items()]}
        summaries = self._call(self.api.containers, all=True, filters=filters)
        found = []
        for summary in summaries:
            if not _labels_match(summary.get("Labels"), label_filters):
                continue  # an engine's filter is not trusted alone (see list_volumes)
            info = self.find(summary["Id"])  # inspect: ports, start time and exit code, which summaries lack
            if info is not None:
                found.append(info)
        return sorted(found, key=lambda c: c.name)

    def create(self, req: envspec.ContainerRequest) -> str:
        if self.engine.name == "podman":
            return self._create_podman(req)
        host_config = self.api.create_host_config(
            port_bindings={f"{cport}/tcp": ("127.0.0.1", hport) for cport, hport in req.ports.items()},
            binds={vol: {"bind": path, "mode": "rw"} for vol, path in req.volumes.items()},
            mounts=[Mount(target, source or None, type=kind, read_only=ro) for kind, source, target, ro in req.mounts]
            or None,
            shm_size=req.shm_size,
            ulimits=[Ulimit(name=n, soft=s, hard=h) for n, (s, h) in req.ulimits.items()],
            device_requests=_device_requests(req.gpus, self.gpu_request),
            init=True,  # docker-init reaps zombies and forwards signals for the entrypoint
            restart_policy={"Name": "unless-stopped"},
            network_mode=req.network or None,
        )
        try:
            created = self._call(self.api.create_container, req.image, name=req.name, labels=req.labels,
                                 environment=req.environment, hostname=req.hostname,
                                 ports=[(p, "tcp") for p in req.ports], host_config=host_config, detach=True)
        except docker.errors.ImageNotFound:
            raise DevenvError(f"image {req.image} is not on {self.host}",
                              "run `devenv up` again to pull or build it") from None
        return str(created["Id"])

    def _create_podman(self, req: envspec.ContainerRequest) -> str:
        """Create through podman's own API: its Docker-compatible create drops device requests and rejects CDI
        names, so a GPU asked for that way would silently be missing."""
        url = f"{self.api.base_url}/v4.0.0/libpod/containers/create"
        try:
            # vfs storage (hosts without overlay) copies the whole image at create: minutes for a CUDA image
            # docker-py's private request helpers, as in bridgeless_network
            response = self.api._post_json(url, data=podman_create_spec(req), timeout=CREATE_TIMEOUT)  # type: ignore[attr-defined]
            created = self.api._result(response, json=True)  # type: ignore[attr-defined]
        except docker.errors.NotFound as exc:
            raise DevenvError(f"image {req.image} is not on {self.host}: {_explain(exc)}",
                              "run `devenv up` again to build it") from None
        except docker.errors.APIError as exc:
            text = _explain(exc)
            if "cdi" in text.lower() or "unresolvable" in text.lower():
                raise DevenvError(f"podman on {self.host} cannot give the GPUs to the container: {text}",
                                  "generate the CDI spec on the host: `sudo nvidia-ctk cdi generate "
                                  "--output=/etc/cdi/nvidia.yaml` (see `devenv check`)") from None
            raise DevenvError(f"podman on {self.host} refused to create the container: {text}",
                              "`devenv status HOST` shows what devenv made there") from None
        except _NETWORK_ERRORS as exc:
            raise self._lost("creating the container", exc) from None
        return str(created["Id"])

    def put_files(self, container: str, files: list[tuple[str, bytes, int]]) -> None:
        """Write (absolute path, data, mode) into a container, owned by root; works before the first start."""
        self._call(self.api.put_archive, container, "/", archive_of(files, int(time.time())))

    def _put_archive(self, container: str, path: str, tar: IO[bytes]) -> bool:
        """Unpack a tar (a seekable file object, as Python's tarfile writes one) under path in a container: sent
        without the zero padding after its end blocks (see tar_without_padding)."""
        return bool(self._call(self.api.put_archive, container, path, tar_without_padding(tar)))

    def read_file(self, container: str, path: str) -> bytes | None:
        try:
            stream, _stat = self._call(self.api.get_archive, container, path)
            data = b"".join(stream)
        except docker.errors.NotFound:
            return None
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            member = tar.next()
            extracted = tar.extractfile(member) if member is not None else None
            return extracted.read() if extracted is not None else None

    def start(self, container: str) -> None:
        try:
            self.api.start(container)
        except docker.errors.APIError as exc:
            text = _explain(exc)
            match = _PORT_TAKEN.search(text)
            if match or "address already in use" in text or "port is already allocated" in text:
                port = int(next(g for g in match.groups() if g)) if match else None
                raise PortInUse(port, text) from None
            refused = refused_limit(text)
            if refused:
                raise LimitRefused(refused, text) from None
            if "could not select device driver" in text:
                raise DevenvError(f"Docker on {self.host} cannot give GPUs to containers: {text}",
                                  "install nvidia-container-toolkit and run `sudo nvidia-ctk runtime configure "
                                  "--runtime=docker && sudo systemctl restart docker` (see `devenv check`)") from None
            raise DevenvError(f"cannot start the environment on {self.host}: {text}",
                              "see `devenv logs HOST` for the container's output") from None
        except _NETWORK_ERRORS as exc:
            raise self._lost("starting the container", exc) from None

    def stop(self, container: str, timeout: int = 10) -> None:
        try:
            self._call(self.api.stop, container, timeout=timeout)
        except docker.errors.NotFound:
            pass

    def remove(self, container: str) -> None:
        try:
            self._call(self.api.remove_container, container, force=True, v=False)
        except docker.errors.NotFound:
            pass

    def exec(self, container: str, argv: list[str]) -> tuple[int, str, str]:
        """Run argv in a running container; (exit code, stdout, stderr)."""
        try:
            exec_id = self.api.exec_create(container, argv, stdout=True, stderr=True)["Id"]
            out, err = self.api.exec_start(exec_id, demux=True)
            code = self.api.exec_inspect(exec_id).get("ExitCode")
        except docker.errors.APIError as exc:
            raise DevenvError(f"cannot run {argv[0]} in the environment on {self.host}: {_explain(exc)}",
                              "is the environment running? (devenv status HOST)") from None
        except _NETWORK_ERRORS as exc:
            raise self._lost(f"running {argv[0]}", exc) from None
        return (code if code is not None else -1,
                (out or b"").decode(errors="replace"), (err or b"").decode(errors="replace"))

    def exec_stream(self, container: str, argv: list[str], tty: bool = False, user: str = ""
                    ) -> tuple[Iterator[tuple[bytes | None, bytes | None]], Callable[[], int]]:
        """Start argv in the container (as user, else the image's: root); (chunks of (stdout, stderr), a
        function giving the exit code after)."""
        try:
            exec_id = self.api.exec_create(container, argv, stdout=True, stderr=True, tty=tty, user=user)["Id"]
            chunks: Iterator[tuple[bytes | None, bytes | None]] | Iterator[bytes]
            if tty:  # one stream: the terminal's
                chunks = self.api.exec_start(exec_id, stream=True, tty=True)
            else:
                chunks = self.api.exec_start(exec_id, stream=True, demux=True)
        except docker.errors.APIError as exc:
            raise DevenvError(f"cannot run {argv[0]} in the environment on {self.host}: {_explain(exc)}",
                              "is the environment running? (devenv status HOST)") from None
        except _NETWORK_ERRORS as exc:
            raise self._lost(f"running {argv[0]}", exc) from None

        def chunks_as_pairs() -> Iterator[tuple[bytes | None, bytes | None]]:
            try:
                for chunk in chunks:
                    yield (chunk, None) if isinstance(chunk, bytes) else chunk
            except _NETWORK_ERRORS as exc:
                raise self._lost_exec(argv, exec_id, container, exc) from None

        def exit_code() -> int:
            # The stream ends at the command's end, or when the connection drops: the exec's own state tells.
            try:
                state = self.api.exec_inspect(exec_id)
                for _ in range(10):  # the stream may close a moment before the daemon records the exit
                    if not state.get("Running") and state.get("ExitCode") is not None:
                        break
                    time.sleep(0.2)
                    state = self.api.exec_inspect(exec_id)
            except _NETWORK_ERRORS as exc:
                raise self._lost_exec(argv, exec_id, container, exc) from None
            except docker.errors.APIError as exc:
                raise DevenvError(f"cannot read the exit code of {argv[0]} on {self.host}: {_explain(exc)}",
                                  None) from None
            code = state.get("ExitCode")
            if state.get("Running") or code is None:
                raise self._lost_exec(argv, exec_id, container, None, still_running=bool(state.get("Running")))
            return int(code)

        return chunks_as_pairs(), exit_code

    def logs(self, container: str, tail: int | str = 100, follow: bool = False) -> Iterator[str]:
        """The container's output as lines (stdout and stderr interleaved, as `docker logs` shows them)."""
        lines_back: int | Literal["all"] = tail if isinstance(tail, int) else "all"  # as docker-py reads it

        def logs() -> bytes:
            return self.api.logs(container, stdout=True, stderr=True, tail=lines_back, stream=False)

        try:
            if not follow:
                data = self._call(logs)
                yield from data.decode(errors="replace").splitlines()
                return
            pending = b""
            for chunk in self.api.logs(container, stdout=True, stderr=True, tail=lines_back, stream=True, follow=True):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    yield line.decode(errors="replace")
            if pending:
                yield pending.decode(errors="replace")
            # A followed log ends when the container stops, or when the connection drops: tell them apart.
            info = self.find(container)
            if info is not None and info.state == "running":
                raise ConnectError(f"the connection to {self.host} was lost while following the log"
                                   f"{self._loss_reason(': ')} (the environment is still running)",
                                   "run `devenv logs HOST -f` again to keep following it")
        except docker.errors.NotFound:
            raise DevenvError(f"the environment's container is gone from {self.host}",
                              "see `devenv status HOST`; `devenv up HOST` makes it again") from None
        except docker.errors.APIError as exc:
            raise DevenvError(f"cannot read the logs on {self.host}: {_explain(exc)}", None) from None
        except _NETWORK_ERRORS as exc:
            raise self._lost("reading logs", exc) from None

    # --- internals -----------------------------------------------------------------------------------

    def _call(self, fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """One API call: NotFound passes to the caller; other refusals and network failures become errors
        the user can act on."""
        started = time.monotonic()
        try:
            return fn(*args, **kwargs)
        except docker.errors.NotFound:
            raise
        except docker.errors.APIError as exc:
            what = getattr(fn, "__name__", "call").replace("_", " ")
            raise DevenvError(f"Docker on {self.host} refused to {what}: {_explain(exc)}",
                              "`devenv status HOST` shows what devenv made there") from None
        except _NETWORK_ERRORS as exc:
            raise self._lost(getattr(fn, "__name__", "a Docker call"), exc) from None
        finally:
            _log.debug("%s: docker %s in %.3f s", self.host, getattr(fn, "__name__", "call"),
                       time.monotonic() - started)

    def _lost_exec(self, argv: list[str], exec_id: str, container: str, exc: BaseException | None,
                   still_running: bool | None = None) -> ConnectError:
        """A lost connection during `exec`: whether the command still runs, and how to see or stop it."""
        if still_running is None:
            try:
                still_running = bool(self.api.exec_inspect(exec_id).get("Running"))
            except Exception:  # the connection is gone: we cannot know, and say so
                still_running = None
        command = " ".join(argv)
        state = {True: "it is still running in the environment",
                 False: "it is no longer running in the environment",
                 None: "it may still be running in the environment (the host cannot be asked now)"}[still_running]
        why = self._loss_reason(": ") or (f": {exc}" if exc is not None and str(exc) else "")
        # pkill -xf matches the whole command line exactly: never another process whose line merely holds argv[0]
        stop = (f"`devenv exec HOST -- pkill -xf {shlex.quote(command)}`" if len(command) <= 200 else
                "`devenv exec HOST -- kill PID` (its PID from ps)")
        return ConnectError(f"the connection to {self.host} was lost while `{command[:60]}` ran{why}; "
                            f"{state}",
                            f"see it with `devenv exec HOST -- ps -ef` (container {container[:12]}); stop it with "
                            f"{stop}; its output from now on is not kept")

    def _loss_reason(self, prefix: str) -> str:
        """Why the SSH connection under the API was dropped, when devenv's keepalive dropped it."""
        reason = getattr(self.conn, "loss_reason", None)
        why = reason() if callable(reason) else None
        return f"{prefix}{why}" if why else ""

    def _lost(self, what: str, exc: BaseException) -> ConnectError:
        why = str(exc) or type(exc).__name__
        return ConnectError(f"lost the Docker connection to {self.host} while {what}: {why}",
                            "the SSH connection or the daemon went away; run the command again "
                            "(devenv up finishes a half-made environment)")


def build_container_prefix(tag: str) -> str:
    """The name that build_by_commit's containers for image `tag` start with: the tag made a container name
    ([A-Za-z0-9_.-]), cut, and a hash of it whole (two tags alike in their first 60 characters differ)."""
    slug = re.sub(r"[^A-Za-z0-9_.-]", "_", tag)[:60]
    return f"{BUILD_CONTAINER}{slug}-{hashlib.sha256(tag.encode()).hexdigest()[:8]}."


def archive_of(files: list[tuple[str, bytes, int]], mtime: int) -> bytes:
    """A tar of (absolute path, data, mode), ending right after its two end-of-archive blocks (see
    tar_without_padding: a padded one failed an `up` on podman in a full run)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path, data, mode in files:
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode, info.mtime = len(data), mode, mtime
            tar.addfile(info, io.BytesIO(data))
    return tar_without_padding(buf).read()


def tar_without_padding(tar: IO[bytes]) -> IO[bytes]:
    """tar (seekable) cut after its two 512-byte end blocks, positioned at 0. Python's tarfile pads an archive
    with zeros to a 10240-byte record; podman's copier closes its pipe after the end blocks, and the padding
    still being sent fails the whole put_archive now and then ("passing bulk input to subprocess: write |1: broken
    pipe"; buildah #6573)."""
    tar.seek(0)
    with tarfile.open(fileobj=tar, mode="r:") as reading:
        for _member in reading:   # reads the headers only, seeking over the members' data
            pass
        end = reading.offset + 2 * tarfile.BLOCKSIZE   # offset: where the end blocks start
    tar.truncate(end)
    tar.seek(0)
    return tar


def podman_create_spec(req: envspec.ContainerRequest) -> Json:
    """podman's SpecGenerator for a container request: the same container the Docker path makes."""
    spec: Json = {
        "image": req.image,
        "name": req.name,
        "labels": dict(req.labels),
        "env": dict(req.environment),
        "hostname": req.hostname,
        "portmappings": [{"host_ip": "127.0.0.1", "host_port": hport, "container_port": cport, "protocol": "tcp"}
                         for cport, hport in req.ports.items()],
        "volumes": [{"Name": vol, "Dest": path} for vol, path in req.volumes.items()],
        "mounts": [{"destination": target, "type": kind, "source": source if kind == "bind" else "tmpfs",
                    "options": (["rbind"] if kind == "bind" else []) + (["ro"] if ro else [])}
                   for kind, source, target, ro in req.mounts],
        "devices": [{"path": name} for name in engines.cdi_device_names(req.gpus)],
        "init": True,
        "restart_policy": "unless-stopped",
    }
    if req.network == envspec.NETWORK_SLIRP:  # on no bridge; the port handler connects from the host's side
        spec["netns"] = {"nsmode": "slirp4netns"}
        spec["network_options"] = {"slirp4netns": ["port_handler=slirp4netns", "allow_host_loopback=false"]}
    elif req.network:
        spec["netns"] = {"nsmode": "bridge"}
        spec["Networks"] = {req.network: {}}
    if req.shm_size:
        spec["shm_size"] = _bytes(req.shm_size)
    if req.ulimits:
        spec["r_limits"] = [{"type": n, "soft": _rlim(s), "hard": _rlim(h)} for n, (s, h) in req.ulimits.items()]
    return spec


def refused_limit(text: str) -> str | None:
    """The ulimit an engine's start error says the host refused (runc's or crun's wording), or None."""
    runc = _RLIMIT_REFUSED.search(text)
    if runc and int(runc.group(1)) in _RLIMIT_NAMES:
        return _RLIMIT_NAMES[int(runc.group(1))]
    crun = _CRUN_RLIMIT_REFUSED.search(text)
    return crun.group(1).lower() if crun else None


def _labels_match(labels: dict[str, str] | None, wanted: dict[str, str]) -> bool:
    return all((labels or {}).get(key) == value for key, value in wanted.items())


def _rlim(value: int) -> int:
    return _RLIM_INFINITY if value < 0 else value


def _digest(image_id: str) -> str:
    return image_id.removeprefix("sha256:")  # podman's build event and inspect differ in this prefix


def _bytes(size: str | int) -> int:
    if isinstance(size, int):
        return size
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    text = size.strip().lower().rstrip("b")
    return int(text[:-1]) * units[text[-1]] if text and text[-1] in units else int(text)


def _device_requests(gpus: str, kind: str = "toolkit") -> list[DeviceRequest]:
    if gpus == "none":
        return []
    if kind == "cdi":  # Docker 25+ with CDI enabled: the "cdi" driver takes CDI names
        return [DeviceRequest(driver="cdi", device_ids=engines.cdi_device_names(gpus))]
    caps = [list(envspec.GPU_CAPABILITIES)]
    if gpus == "all":
        return [DeviceRequest(count=-1, capabilities=caps)]
    return [DeviceRequest(device_ids=gpus.split(","), capabilities=caps)]


def _image_info(ref: str, data: Json) -> ImageInfo:
    return ImageInfo(ref=ref, id=data.get("Id", ""), size_bytes=int(data.get("Size") or 0),
                     labels=dict((data.get("Config") or {}).get("Labels") or {}))


def _container_info(data: Json) -> ContainerInfo:
    state = data.get("State") or {}
    ports: dict[int, int] = {}
    for key, bindings in ((data.get("NetworkSettings") or {}).get("Ports") or {}).items():
        for binding in bindings or []:
            if binding.get("HostPort"):
                ports[int(key.split("/")[0])] = int(binding["HostPort"])
                break
    networks = (data.get("NetworkSettings") or {}).get("Networks") or {}
    ip = next((n.get("IPAddress") for n in networks.values() if n.get("IPAddress")), "")
    return ContainerInfo(
        id=data["Id"],
        name=data.get("Name", "").lstrip("/"),
        state=state.get("Status", "unknown"),
        labels=dict((data.get("Config") or {}).get("Labels") or {}),
        image_id=data.get("Image", ""),
        host_ports=ports,
        created=data.get("Created", ""),
        started_at=state.get("StartedAt", ""),
        exit_code=state.get("ExitCode"),
        restart_count=int(data.get("RestartCount") or 0),
        ip=ip,
    )


def _pull_event(event: Json) -> ProgressEvent:
    detail = event.get("progressDetail") or {}
    text = " ".join(str(p) for p in (event.get("id"), event.get("status")) if p)
    return ProgressEvent(text=text, layer=event.get("id"), current=detail.get("current"), total=detail.get("total"))


def _split_ref(ref: str) -> tuple[str, str | None]:
    """'repo:tag' / 'repo@sha256:..' / 'host:5000/repo' -> (repo, tag or digest)."""
    if "@" in ref:
        repo, digest = ref.split("@", 1)
        return repo, digest
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        repo, tag = ref.rsplit(":", 1)
        return repo, tag
    return ref, "latest"


def _explain(exc: docker.errors.APIError) -> str:
    return str(getattr(exc, "explanation", None) or exc).strip()
