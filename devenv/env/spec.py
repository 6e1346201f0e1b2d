"""What an environment is made from (L0): its spec, its hash, names on the host and the labels that carry both.

The host is the source of truth: every container and volume devenv makes carries labels (environment, owner,
spec and its hash, preferred ports), so `status` and `up` read the state from the host even after the laptop's
state directory is gone. The spec hash decides reattach (same) or recreate (changed, after showing the diff).
"""

from __future__ import annotations

import getpass
import hashlib
import json
import os
import re
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, Literal

from devenv.config.profiles import EnvProfile
from devenv.errors import DevenvError

LABEL = "org.devenv"
MANAGED = f"{LABEL}.managed"
ENV = f"{LABEL}.env"
HOST = f"{LABEL}.host"
OWNER = f"{LABEL}.owner"
SPEC = f"{LABEL}.spec"
SPEC_HASH = f"{LABEL}.spec-hash"
PORTS = f"{LABEL}.ports"
ROLE = f"{LABEL}.role"          # on volumes: which of the profile's volumes this is; "network" on the network
VERSION = f"{LABEL}.version"
GPUS = f"{LABEL}.gpus"          # the host GPUs the container was given ("0,1"; "all"), picked at `up` for gpus: N

# Where the services listen inside the container (the image's entrypoint); the host publishes them on
# 127.0.0.1 at the profile's preferred ports, or at free ones when those are taken.
CONTAINER_PORTS = {"jupyter": 8888, "ssh": 22}
NETWORK_OWN = "own"
# The network of a request on podman where slirp4netns is installed: the container is on no bridge at all (its
# own network namespace behind a user-mode stack), so no sibling container can route to it; the published
# 127.0.0.1 ports reach it through slirp4netns's port handler. podman 4.3's CNI bridges forward between
# networks (masqueraded as the gateway), so its own bridge would not keep siblings out (docs/environments.md).
NETWORK_SLIRP = "slirp4netns"


def owner() -> str:
    """Who owns environments made from this laptop: $DEVENV_OWNER, else the login name (safe for names)."""
    raw = os.environ.get("DEVENV_OWNER") or getpass.getuser() or "user"
    return re.sub(r"[^a-z0-9_.-]+", "-", raw.lower()).strip("-.") or "user"


def container_name(owner_name: str, env_name: str) -> str:
    """A name no other (owner, env) pair can have: `-` joins parts that may hold `-` themselves (owner `a` + env
    `b-c` and owner `a-b` + env `c` both read devenv-a-b-c), so a digest of the parts ends the name. Names are
    for people; environments are found by their labels (owner, env, host), never by name."""
    return f"devenv-{owner_name}-{env_name}-{_digest(owner_name, env_name)}"


def network_name(owner_name: str, env_name: str) -> str:
    """The environment's own bridge network (Docker keeps network names apart from container names)."""
    return container_name(owner_name, env_name)


def volume_name(owner_name: str, env_name: str, role: str) -> str:
    return f"devenv-{owner_name}-{env_name}-{role}-{_digest(owner_name, env_name, role)}"


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:8]


def services(env: EnvProfile) -> list[str]:
    """The services the environment runs, by the names used in ports/labels ("jupyter", "ssh")."""
    return [name for name, on in (("jupyter", env.jupyter), ("ssh", env.sshd)) if on]


def desired_spec(env: EnvProfile, image_id: str, ssh_key: str) -> dict[str, Any]:
    """Everything a container is made from; a change in any of it means a new container.

    ssh_key is the public key the container's sshd accepts (a change must reach authorized_keys)."""
    return {
        "env": env.name,
        "image": env.image,
        "image_id": image_id,
        "ports": {name: env.ports.get(name, CONTAINER_PORTS[name]) for name in services(env)},
        "volumes": dict(sorted(env.volumes.items())),
        "env_vars": dict(sorted(env.env.items())),
        "shm_size": env.shm_size,
        "gpus": env.gpus,
        "jupyter": env.jupyter,
        "sshd": env.sshd,
        "ssh_key": ssh_key if env.sshd else "",
        # Its own bridge network: containers on other networks (the default bridge) cannot reach Jupyter and
        # sshd; the ports published on the host's 127.0.0.1 are the way in. In the spec, so an environment made
        # on the shared bridge before this is shown as changed and recreated (its workspace kept).
        "network": NETWORK_OWN,
        # Only when set, so the hash of every environment made before stays what it was.
        **({"user": env.user} if env.user else {}),
        **({"mounts": [[m.type, m.source, m.target, m.readonly] for m in env.mounts]} if env.mounts else {}),
    }


def spec_hash(spec: dict[str, Any]) -> str:
    canonical = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def labels(spec: dict[str, Any], owner_name: str, host_name: str, version: str) -> dict[str, str]:
    return {
        MANAGED: "1",
        ENV: spec["env"],
        OWNER: owner_name,
        HOST: host_name,
        SPEC: json.dumps(spec, sort_keys=True, separators=(",", ":")),
        SPEC_HASH: spec_hash(spec),
        PORTS: json.dumps(spec["ports"], sort_keys=True),
        VERSION: version,
    }


def spec_from_labels(container_labels: dict[str, str]) -> dict[str, Any] | None:
    try:
        spec = json.loads(container_labels.get(SPEC) or "")
    except ValueError:
        return None
    return spec if isinstance(spec, dict) else None


def diff_specs(old: dict[str, Any] | None, new: dict[str, Any]) -> list[str]:
    """Human lines for what changed, one a field: 'image_id: sha256:1a2b -> sha256:3c4d'."""
    if old is None:
        return ["(the running container carries no readable spec)"]
    lines = []
    for key in sorted(set(old) | set(new)):
        before, after = old.get(key), new.get(key)
        if before != after:
            lines.append(f"{key}: {_show(key, before)} -> {_show(key, after)}")
    return lines


def _show(key: str, value: Any) -> str:
    if value is None:
        return "(none)"
    if key == "image_id" and isinstance(value, str):
        return value[:19]  # "sha256:" + 12 hex, as `docker images` shows
    if key == "ssh_key" and isinstance(value, str):
        return value or "(none)"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return str(value)


# --- what a container is created with ------------------------------------------------------------------

# PyTorch data loaders share batches through /dev/shm (shm_size) and pin memory; NVIDIA's containers
# recommend unlimited memlock and a 64 MiB stack.
ULIMITS = {"memlock": (-1, -1), "stack": (67108864, 67108864), "nofile": (1048576, 1048576)}
# GPUs are asked for through a device request with only the capabilities CUDA needs (compute: CUDA,
# utility: nvidia-smi/NVML); "display"/"graphics" fail on headless hosts.
GPU_CAPABILITIES = ("gpu", "compute", "utility")
MountKind = Literal["bind", "tmpfs"]  # what a profile's mounts may be (config.profiles checks it)


@dataclass(frozen=True)
class ContainerRequest:
    name: str
    image: str
    labels: dict[str, str]
    environment: dict[str, str]
    ports: dict[int, int | None]      # container port -> preferred host port (None: any free one)
    volumes: dict[str, str]           # volume name -> mount path
    shm_size: str
    gpus: str                         # all | none | "0,1" (a count, free:N, is resolved to indices before this)
    hostname: str
    network: str | None = None        # the bridge network to attach to (None: the engine's default)
    ulimits: dict[str, tuple[int, int]] = field(default_factory=lambda: dict(ULIMITS))
    mounts: tuple[tuple[MountKind, str, str, bool], ...] = ()   # (bind | tmpfs, host source, target, readonly)
    user: str = "root"                # the environment's user (exec runs as it; the entrypoint starts as root)


def container_request(spec: dict[str, Any], owner_name: str, host_name: str, version: str,
                      any_port: AbstractSet[str] = frozenset(), chosen_gpus: str | None = None,
                      volume_names: dict[str, str] | None = None, network: str | None = None) -> ContainerRequest:
    """The container for a spec; services in any_port get a free host port instead of the preferred one.
    chosen_gpus: the indices picked for a spec that asks for a count of free GPUs (gpus: free:N); recorded in
    a label of its own, outside the spec hash, so a later `up` with other GPUs free still reattaches.
    volume_names: role -> the volume already made for it (found by its labels), else volume_name()."""
    volume_names = volume_names or {}
    env_name = spec["env"]
    gpus = spec["gpus"]
    if str(gpus).startswith("free:"):
        if not chosen_gpus:
            raise DevenvError(f"internal: the environment '{env_name}' asks for {gpus[5:]} free GPU(s) "
                              "but none were picked", "report this bug")
        gpus = chosen_gpus
    request_labels = labels(spec, owner_name, host_name, version)
    if gpus != "none":
        request_labels[GPUS] = gpus
    environment = dict(spec["env_vars"])
    if spec["env_vars"]:  # their names: the entrypoint gives them to ssh sessions too (sshd's SetEnv)
        environment["DEVENV_ENV_VARS"] = " ".join(sorted(spec["env_vars"]))
    environment["DEVENV_JUPYTER"] = "1" if spec["jupyter"] else "0"
    environment["DEVENV_SSHD"] = "1" if spec["sshd"] else "0"
    environment["DEVENV_ENV"] = env_name
    workspace = spec["volumes"].get("workspace")
    if workspace:
        environment["DEVENV_WORKSPACE"] = workspace
    if spec.get("user"):
        environment["DEVENV_USER"] = spec["user"]
        # the volumes' top folders become the user's at start (a fresh volume's mount point is root's)
        environment["DEVENV_USER_DIRS"] = ":".join(sorted(spec["volumes"].values()))
    return ContainerRequest(
        name=container_name(owner_name, env_name),
        image=spec["image_id"] or spec["image"],
        labels=request_labels,
        environment=environment,
        ports={CONTAINER_PORTS[svc]: (None if svc in any_port else port) for svc, port in spec["ports"].items()},
        volumes={volume_names.get(role) or volume_name(owner_name, env_name, role): path
                 for role, path in spec["volumes"].items()},
        shm_size=spec["shm_size"],
        gpus=gpus,
        hostname=f"devenv-{env_name}"[:63],
        network=network,
        mounts=tuple((m[0], m[1], m[2], bool(m[3])) for m in spec.get("mounts", [])),
        user=spec.get("user") or "root",
    )


def user_of(spec: dict[str, Any] | None) -> str:
    """The user an environment's commands run as, from its spec (labels): root unless it has its own."""
    return str((spec or {}).get("user") or "root")
