"""Which container engine `check` finds (Docker or podman) and whether it can hand GPUs to containers (L0).

Docker with the NVIDIA toolkit takes device requests; podman (and Docker 25+ with CDI enabled) takes CDI device
names, which need a CDI spec on the host listing the GPUs (`nvidia-ctk cdi generate`). The probes are shell
commands run with the others in one batch; the judges read their recorded answers.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from dataclasses import dataclass, field
from typing import Any

import yaml

from devenv.checks.host import Output, judge_docker, judge_toolkit, parse_docker_json
from devenv.checks.report import FAIL, PASS, SKIP, WARN, CheckResult
from devenv.env import engines

# Where the engines read CDI specs by default; DEVENV_CDI_SPEC_DIRS on the host names others (containers.conf's
# cdi_spec_dirs, Docker's cdi-spec-dirs).
CDI_DIRS = "/etc/cdi /var/run/cdi"
_SPEC_MARK = "=== devenv-cdi-spec "
_SPEC_LIMIT = 262144  # bytes read per spec file: generated specs are tens of KB

_PODMAN_INFO = "command -v podman >/dev/null 2>&1 || exit 127; podman info --format json 2>&1"
PROBES: dict[str, str] = {
    "podman_info": _PODMAN_INFO,
    "cdi_specs": (f'for d in ${{DEVENV_CDI_SPEC_DIRS:-{CDI_DIRS}}}; do '
                  'for f in "$d"/*.yaml "$d"/*.yml "$d"/*.json; do '
                  f'[ -f "$f" ] || continue; echo "{_SPEC_MARK}$f"; head -c {_SPEC_LIMIT} "$f"; echo; '
                  'done; done; true'),
}
CDI_REMEDY = ("generate it on the host: `sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml` "
              "(NVIDIA container toolkit)")


def podman_info_probe(engine: str) -> str:
    """podman's info, asked only where choose_engine reads it: `engine: podman`, or `auto` on a host without the
    docker CLI. Elsewhere it is never read, and `podman info` is the batch's slowest probe (~0.2 s of CPU, more
    than the rest together), so a host with both engines skips it (exit 0: "not asked", not "not installed")."""
    if engine == "podman":
        return _PODMAN_INFO
    if engine == "docker":
        return "exit 0"
    return f"if command -v docker >/dev/null 2>&1; then exit 0; fi; {_PODMAN_INFO}"


def docker_endpoint_probe(engine: str) -> str:
    """Where the host's docker CLI sends API calls (DOCKER_HOST, DOCKER_CONTEXT and the current context
    applied): what `docker system dial-stdio` connects to. Not asked for podman."""
    if engine == "podman":
        return "exit 0"
    return ("command -v docker >/dev/null 2>&1 || exit 127; "
            "docker context inspect --format '{{.Endpoints.docker.Host}}' 2>&1")


def docker_socket(endpoint: Output) -> str | None:
    """The unix socket path of a docker endpoint probe's answer (None: unknown, or not a local socket)."""
    text = endpoint.stdout.strip()
    if endpoint.exit_code != 0 or not text.startswith("unix:///") or len(text.splitlines()) != 1:
        return None
    return text[len("unix://"):]


def image_probe(image: str, engine: str) -> str:
    """The image's inspect JSON from the engine devenv will use."""
    quoted = shlex.quote(image)
    if engine == "podman":
        return f"podman image inspect {quoted} --format '{{{{json .}}}}' 2>&1"
    if engine == "docker":
        return f"docker image inspect {quoted} --format '{{{{json .}}}}' 2>&1"
    return (f"if command -v docker >/dev/null 2>&1; then docker image inspect {quoted} --format '{{{{json .}}}}' 2>&1; "
            f"else podman image inspect {quoted} --format '{{{{json .}}}}' 2>&1; fi")


def disk_probe(engine: str) -> str:
    """Free space where the engine keeps images; the directory on the first line, df's line on the second."""
    docker_dir = "docker info --format '{{.DockerRootDir}}' 2>/dev/null"
    podman_dir = "podman info --format '{{.Store.GraphRoot}}' 2>/dev/null"
    pick = {"docker": f"dir=$({docker_dir}); [ -n \"$dir\" ] || dir=/var/lib/docker",
            "podman": f"dir=$({podman_dir}); [ -n \"$dir\" ] || dir=/var/lib/containers/storage"}.get(
        engine, f"if command -v docker >/dev/null 2>&1; then dir=$({docker_dir}); [ -n \"$dir\" ] || "
                f"dir=/var/lib/docker; else dir=$({podman_dir}); fi")
    return f'{pick}; [ -n "$dir" ] && [ -e "$dir" ] || dir=$HOME; echo "$dir"; df -PB1 "$dir" 2>&1 | tail -n 1'


@dataclass(frozen=True)
class CdiSpec:
    path: str
    kind: str
    devices: tuple[str, ...] = ()
    error: str | None = None

    def qualified(self) -> list[str]:
        return [f"{self.kind}={name}" for name in self.devices]


@dataclass
class EngineChoice:
    """The engine `check` finds for a host profile, and the checks that say so."""

    name: str | None                      # docker | podman | None (none usable)
    results: list[CheckResult] = field(default_factory=list)
    docker_info: dict[str, Any] | None = None


def parse_cdi_specs(stdout: str) -> list[CdiSpec]:
    """The spec files a cdi_specs probe printed, each with its kind and device names (broken ones say why)."""
    specs: list[CdiSpec] = []
    chunks = stdout.split(_SPEC_MARK)
    for chunk in chunks[1:]:
        path, _, text = chunk.partition("\n")
        try:
            data = yaml.safe_load(text)  # JSON specs are YAML too
        except yaml.YAMLError as exc:
            specs.append(CdiSpec(path, "?", (), f"not valid YAML/JSON: {str(exc).splitlines()[0]}"))
            continue
        if not isinstance(data, dict) or not isinstance(data.get("kind"), str):
            specs.append(CdiSpec(path, "?", (), "no 'kind' in the spec"))
            continue
        names = tuple(str(d.get("name")) for d in data.get("devices") or [] if isinstance(d, dict) and d.get("name"))
        specs.append(CdiSpec(path, data["kind"], names))
    return specs


def choose_engine(profile_engine: str, docker_version: Output, docker_info_out: Output,
                  podman_info: Output) -> EngineChoice:
    """The engine devenv will use for the host, as its runtime picks it (docker's CLI first when `auto`)."""
    docker_installed = docker_version.exit_code != 127
    podman_installed = podman_info.exit_code != 127
    use_podman = profile_engine == "podman" or (profile_engine == "auto" and not docker_installed and podman_installed)
    if use_podman:
        return EngineChoice("podman", judge_podman(podman_info))
    results = judge_docker(docker_version, docker_info_out)
    if not docker_installed and profile_engine == "auto":
        results = [CheckResult("engine", "Container engine", FAIL, "neither docker nor podman is installed",
                               "install Docker Engine (or podman), or set `runtime: host` in the host profile "
                               "to run without containers")]
        return EngineChoice(None, results)
    docker_info = parse_docker_json(docker_info_out) if docker_info_out.exit_code == 0 else None
    ok = all(r.status != FAIL for r in results)
    return EngineChoice("docker" if ok else None, results, docker_info)


def judge_podman(info: Output) -> list[CheckResult]:
    if info.exit_code == 127:
        return [CheckResult("engine", "Container engine", FAIL, "podman is not installed (engine: podman)",
                            "install podman (`apt install podman`, `dnf install podman`), or set `engine: docker`")]
    data = _json(info.stdout)
    if info.exit_code != 0 or not data:
        why = (info.stdout.strip().splitlines() or ["`podman info` failed"])[-1][:200]
        return [CheckResult("engine", "Container engine", FAIL, f"podman does not answer: {why}",
                            "run `podman info` on the host to see why")]
    host = data.get("host") or {}
    version = (data.get("version") or {}).get("Version", "?")
    rootless = bool((host.get("security") or {}).get("rootless"))
    socket = host.get("remoteSocket") or {}
    mode = "rootless" if rootless else "rootful"
    details = {"engine": "podman", "version": version, "rootless": rootless, "socket": socket.get("path"),
               "dial": engines.dial_command("podman")}
    value = f"podman {version} ({mode}), API through `podman system dial-stdio`"
    if socket and socket.get("exists") is False:
        start = ("systemctl --user enable --now podman.socket" if rootless
                 else "sudo systemctl enable --now podman.socket")
        return [CheckResult("engine", "Container engine", FAIL, f"podman {version} ({mode}), but its API service is "
                            f"not running (no {socket.get('path') or 'socket'})",
                            f"start it: `{start}` (or `podman system service -t 0 &`)", details)]
    return [CheckResult("engine", "Container engine", PASS, value, None, details), judge_podman_network(host)]


def judge_podman_network(host: dict[str, Any]) -> CheckResult:
    """With slirp4netns, podman environments sit on no bridge, out of every other container's reach; without it
    they get a CNI bridge of their own, which podman 4.3 forwards between (docs/environments.md)."""
    title = "Environment network (podman)"
    slirp = (host.get("slirp4netns") or {}).get("executable")
    if slirp:
        return CheckResult("engine.network", title, PASS, f"slirp4netns ({slirp}): the environment is on no bridge, "
                           "so no other container can reach it; its ports are published on 127.0.0.1 only")
    return CheckResult("engine.network", title, WARN, "no slirp4netns: the environment gets a CNI bridge of its "
                       "own, and other containers on this host can reach its ports there (the Jupyter token and "
                       "the ssh key still guard them)",
                       "install slirp4netns on the host (`apt install slirp4netns`, `dnf install slirp4netns`); "
                       "environments made after that are on no bridge (`devenv down` then `devenv up` moves one)")


def judge_gpu_access(engine: str | None, gpu_devices: str, gpus: str, toolkit: Output, cdi_out: Output,
                     docker_info: dict[str, Any] | None, has_gpu: bool, wants_gpu: bool) -> CheckResult:
    """Can the engine hand the environment's GPUs to its container, the way devenv will ask for them?"""
    if engine is None:
        return CheckResult("gpu.access", "GPUs for containers", SKIP, "no usable container engine")
    kind = engines.gpu_request_kind(engine, gpu_devices)
    if kind == "toolkit":
        result = judge_toolkit(toolkit, docker_info, has_gpu, wants_gpu)
        specs = parse_cdi_specs(cdi_out.stdout)
        if result.status == FAIL and _cdi_enabled(docker_info) and _gpu_specs(specs):
            result = dataclasses.replace(result, remedy="this Docker has CDI enabled and a CDI spec lists the GPUs: "
                                         "set `gpu_devices: cdi` in the host profile, or " + (result.remedy or ""))
        return result
    title = "GPUs for containers (CDI)"
    if not has_gpu or not wants_gpu:
        return CheckResult("gpu.access", title, SKIP, "no GPU to hand to containers" if not has_gpu
                           else "this environment asks for no GPU")
    if engine == "docker" and not _cdi_enabled(docker_info):
        return CheckResult("gpu.access", title, FAIL, "gpu_devices: cdi, but this Docker has CDI off",
                           "Docker 25+: add `\"features\": {\"cdi\": true}` to /etc/docker/daemon.json and restart "
                           "dockerd, or set `gpu_devices: toolkit`")
    return judge_cdi(parse_cdi_specs(cdi_out.stdout), engines.cdi_device_names(gpus))


def judge_cdi(specs: list[CdiSpec], wanted: list[str]) -> CheckResult:
    """Every wanted CDI name (nvidia.com/gpu=all, =0, ...) must be listed by a spec the engine reads."""
    title = "GPUs for containers (CDI)"
    listed = sorted({name for spec in specs if not spec.error for name in spec.qualified()})
    details = {"specs": [spec.path for spec in specs], "listed": listed, "wanted": wanted,
               "broken": {spec.path: spec.error for spec in specs if spec.error}}
    gpu_specs = _gpu_specs(specs)
    if not gpu_specs:
        others = ", ".join(listed[:6]) or "none"
        seen = f"no CDI spec lists {engines.CDI_GPU_KIND} devices (specs found: {len(specs)}; devices: {others})"
        broken = [f"{spec.path}: {spec.error}" for spec in specs if spec.error]
        return CheckResult("gpu.access", title, FAIL, seen + (f"; unreadable: {broken[0]}" if broken else ""),
                           CDI_REMEDY, details)
    missing = [name for name in wanted if name not in listed]
    paths = ", ".join(spec.path for spec in gpu_specs)
    if missing:
        have = ", ".join(n for n in listed if n.startswith(engines.CDI_GPU_KIND)) or "none"
        return CheckResult("gpu.access", title, FAIL, f"{paths} lacks {', '.join(missing)} (lists {have})",
                           "regenerate the spec after a driver or GPU change: `sudo nvidia-ctk cdi generate "
                           "--output=/etc/cdi/nvidia.yaml`, or ask for GPUs it lists", details)
    return CheckResult("gpu.access", title, PASS, f"{paths} lists {', '.join(wanted)}", None, details)


def _gpu_specs(specs: list[CdiSpec]) -> list[CdiSpec]:
    return [spec for spec in specs if spec.kind == engines.CDI_GPU_KIND and spec.devices and not spec.error]


def _cdi_enabled(docker_info: dict[str, Any] | None) -> bool:
    return bool((docker_info or {}).get("CDISpecDirs"))


def _json(text: str) -> dict[str, Any] | None:
    start = text.find("{")
    if start < 0:
        return None
    try:
        data = json.loads(text[start:])
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None
