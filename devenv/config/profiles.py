"""Host and environment profiles (YAML): loading, validation with file:line:field errors, lookup by name.

Lookup order (later wins, by name): bundled profiles < user profiles ($DEVENV_HOME/profiles, else the XDG
config dir). Validation walks the YAML node tree, so every error names the file, the line and the field.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import yaml

from devenv.cluster.slurm_job import SettingError, SlurmSettings
from devenv.cluster.slurm_job import validate as validate_slurm
from devenv.config import paths
from devenv.errors import ProfileError

KINDS = ("hosts", "envs")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class SSHTarget:
    alias: str | None = None
    hostname: str | None = None
    user: str | None = None
    port: int | None = None
    identity_file: str | None = None
    proxy_jump: tuple[str, ...] = ()
    connect_timeout: float | None = None


class RuntimeKind(str, Enum):
    """Where a host's environments live (`runtime:` of a host profile). Only services.backends branches on it."""

    DOCKER = "docker"   # a container of the host's Docker (or podman) engine
    HOST = "host"       # the bare host: Jupyter run by the host's python
    SLURM = "slurm"     # a Slurm job, submitted from the login node the profile names
    AUTO = "auto"       # docker where the host has it, else host (decided once connected)

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class HostProfile:
    name: str
    source: str
    description: str = ""
    local: bool = False
    ssh: SSHTarget | None = None
    runtime: RuntimeKind = RuntimeKind.DOCKER
    python: str = "python3"
    default_env: str = "cuda"
    groups: tuple[str, ...] = ()
    engine: str = "auto"              # container engine: auto (docker if its CLI is there, else podman) | docker | podman
    gpu_devices: str = "auto"         # how GPUs reach containers: auto (podman: cdi, docker: toolkit) | toolkit | cdi
    slurm: SlurmSettings | None = None      # runtime: slurm: what each environment job asks the scheduler for

    def __post_init__(self) -> None:
        if not isinstance(self.runtime, RuntimeKind):  # a plain string from a caller (replace(), tests)
            object.__setattr__(self, "runtime", RuntimeKind(self.runtime))

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "runtime": self.runtime.value}  # plain data: YAML and JSON alike


@dataclass(frozen=True)
class BuildSpec:
    dockerfile: str
    args: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class EnvProfile:
    name: str
    source: str
    image: str
    description: str = ""
    build: BuildSpec | None = None
    cuda: str | None = None
    torch: str | None = None
    image_size_gb: float | None = None
    ports: dict[str, int] = field(default_factory=lambda: {"jupyter": 8888, "ssh": 2222})
    volumes: dict[str, str] = field(default_factory=lambda: {"workspace": "/workspace"})
    env: dict[str, str] = field(default_factory=dict)
    shm_size: str = "8g"
    gpus: str = "all"                 # all | none | free:N (gpus: N) | "0,1" (devenv.gpu.choose)
    jupyter: bool = True
    sshd: bool = True

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --- validation over YAML nodes ----------------------------------------------------------------------

class _Ctx:
    """Where we are in a file, so each error says file:line and the field's dotted path."""

    def __init__(self, source: str):
        self.source = source

    def fail(self, node: yaml.Node | None, where: str, problem: str, hint: str) -> ProfileError:
        line = f":{node.start_mark.line + 1}" if node is not None else ""
        field_part = f" field '{where}'" if where else ""
        return ProfileError(f"{self.source}{line}:{field_part} {problem}", hint)


def _scalar(ctx: _Ctx, node: yaml.Node, where: str, what: str = "a string") -> str:
    if not isinstance(node, yaml.ScalarNode) or node.tag == "tag:yaml.org,2002:null":
        raise ctx.fail(node, where, f"expected {what}, got {_describe(node)}", f"write {where}: <{what}>")
    return str(node.value)


def _string(ctx, node, where):
    return _scalar(ctx, node, where)


def _int(ctx, node, where, lo: int = 1, hi: int = 65535):
    text = _scalar(ctx, node, where, "an integer")
    if not re.fullmatch(r"\d+", text) or not lo <= int(text) <= hi:
        raise ctx.fail(node, where, f"expected an integer from {lo} to {hi}, got '{text}'", f"e.g. {where}: {lo}")
    return int(text)


def _number(ctx, node, where):
    text = _scalar(ctx, node, where, "a number")
    try:
        value = float(text)
    except ValueError:
        raise ctx.fail(node, where, f"expected a number, got '{text}'", f"e.g. {where}: 20") from None
    if value <= 0:
        raise ctx.fail(node, where, f"expected a positive number, got '{text}'", f"e.g. {where}: 20")
    return value


def _bool(ctx, node, where):
    text = _scalar(ctx, node, where, "true or false").lower()
    if text in ("true", "yes", "on"):
        return True
    if text in ("false", "no", "off"):
        return False
    raise ctx.fail(node, where, f"expected true or false, got '{text}'", f"write {where}: true")


def _choice(*choices: str):
    def parse(ctx, node, where):
        text = _scalar(ctx, node, where, " or ".join(choices))
        if text not in choices:
            raise ctx.fail(node, where, f"expected one of {', '.join(choices)}, got '{text}'",
                           f"write {where}: {choices[0]}")
        return text
    return parse


def _version(pattern: str, example: str):
    def parse(ctx, node, where):
        text = _scalar(ctx, node, where, "a version string")
        if not re.fullmatch(pattern, text):
            raise ctx.fail(node, where, f"expected a version like '{example}', got '{text}'",
                           f'write {where}: "{example}" (quoted, so YAML keeps it a string)')
        return text
    return parse


def _list_of_strings(ctx, node, where):
    """A list of strings; a single comma-separated string is accepted too (as ProxyJump writes it)."""
    if isinstance(node, yaml.ScalarNode):
        return tuple(p.strip() for p in _scalar(ctx, node, where).split(",") if p.strip())
    if not isinstance(node, yaml.SequenceNode):
        raise ctx.fail(node, where, f"expected a list, got {_describe(node)}", f"write {where}: [a, b]")
    return tuple(_string(ctx, item, f"{where}[{i}]") for i, item in enumerate(node.value))


def _mapping_of(value_parser: Callable, key_pattern: str = r"[A-Za-z_][A-Za-z0-9_.-]*"):
    def parse(ctx, node, where):
        if not isinstance(node, yaml.MappingNode):
            raise ctx.fail(node, where, f"expected a mapping, got {_describe(node)}", f"write {where}: {{name: value}}")
        out = {}
        for key_node, value_node in node.value:
            key = _string(ctx, key_node, where)
            if not re.fullmatch(key_pattern, key):
                raise ctx.fail(key_node, f"{where}.{key}", "is not a valid name", "use letters, digits, _ . -")
            out[key] = value_parser(ctx, value_node, f"{where}.{key}")
        return out
    return parse


def _gpus(ctx, node, where):
    """all | none | N (N free GPUs, picked at `up`) | [0, 1] / "0,1" / device=1 (those GPUs): devenv.gpu.choose."""
    from devenv.gpu.choose import parse_gpus

    if isinstance(node, yaml.SequenceNode):
        ids = [_int(ctx, n, f"{where}[{i}]", 0, 1023) for i, n in enumerate(node.value)]
        return ",".join(str(i) for i in ids)
    text = _scalar(ctx, node, where, "'all', 'none', a count or GPU indices")
    try:
        return parse_gpus(text)
    except ValueError as e:
        raise ctx.fail(node, where, str(e), f"write {where}: all, {where}: 2 (two free GPUs) or {where}: [0, 1]")            from None


def _fields(ctx: _Ctx, node: yaml.Node, where: str, schema: dict[str, Callable]) -> dict[str, Any]:
    """Check a mapping against a schema: unknown fields are errors that list the known ones."""
    if not isinstance(node, yaml.MappingNode):
        raise ctx.fail(node, where, f"expected a mapping, got {_describe(node)}", "see profiles/ for examples")
    out: dict[str, Any] = {}
    for key_node, value_node in node.value:
        key = _string(ctx, key_node, where)
        path = f"{where}.{key}" if where else key
        if key not in schema:
            close = [k for k in schema if k.startswith(key[:3])]
            suggestion = f"did you mean '{close[0]}'? " if close else ""
            raise ctx.fail(key_node, path, "is not a known field",
                           f"{suggestion}known fields: {', '.join(sorted(schema))}")
        if key in out:
            raise ctx.fail(key_node, path, "appears twice", "keep one")
        out[key] = schema[key](ctx, value_node, path)
    return out


def _ssh_target(ctx, node, where):
    values = _fields(ctx, node, where, {
        "alias": _string, "hostname": _string, "user": _string,
        "port": _int, "identity_file": _string, "proxy_jump": _list_of_strings,
        "connect_timeout": _number,
    })
    if not values.get("alias") and not values.get("hostname"):
        raise ctx.fail(node, where, "needs 'alias' (an ~/.ssh/config Host) or 'hostname'",
                       f"e.g.\n  {where}:\n    alias: my-gpu-box")
    return SSHTarget(**values)


def _build(ctx, node, where):
    values = _fields(ctx, node, where, {"dockerfile": _string, "args": _mapping_of(_string, r"[A-Za-z_][A-Za-z0-9_]*")})
    if "dockerfile" not in values:
        raise ctx.fail(node, where, "needs 'dockerfile' (a file under images/)", f"e.g. {where}: {{dockerfile: pytorch.Dockerfile}}")
    return BuildSpec(**values)


def _slurm(ctx, node, where):
    """`slurm:` of a login node's host profile; each value checked as Slurm would take it, and as one word."""
    values = _fields(ctx, node, where, {
        "partition": _string, "account": _string, "qos": _string, "time": _string,
        "nodes": lambda c, n, w: _int(c, n, w, 1, 4096),
        "gpus_per_node": lambda c, n, w: _int(c, n, w, 0, 64), "gpu_type": _string,
        "cpus_per_gpu": lambda c, n, w: _int(c, n, w, 1, 1024), "mem_per_gpu": _string,
        "cpus_per_node": lambda c, n, w: _int(c, n, w, 1, 100000), "mem": _string,
        "constraint": _string, "extra_sbatch": _list_of_strings, "queue_timeout": _number,
    })
    settings = SlurmSettings(**values)
    try:
        return validate_slurm(settings)
    except SettingError as exc:
        field_node = next((v for k, v in node.value if k.value == exc.field), node)
        raise ctx.fail(field_node, f"{where}.{exc.field}", exc.problem, exc.hint) from None


HOST_SCHEMA: dict[str, Callable] = {
    "description": _string,
    "local": _bool,
    "ssh": _ssh_target,
    "runtime": _choice("docker", "host", "slurm", "auto"),
    "python": _string,
    "default_env": _string,
    "groups": _list_of_strings,
    "engine": _choice("auto", "docker", "podman"),
    "gpu_devices": _choice("auto", "toolkit", "cdi"),
    "slurm": _slurm,
}

ENV_SCHEMA: dict[str, Callable] = {
    "description": _string,
    "image": _string,
    "build": _build,
    "cuda": _version(r"\d+\.\d+(\.\d+)?", "12.8"),
    "torch": _version(r"\d+\.\d+(\.\d+)?(\+(cu\d+|cpu|rocm[\d.]+))?", "2.8.0+cu128"),
    "image_size_gb": _number,
    "ports": _mapping_of(lambda c, n, w: _int(c, n, w, 1, 65535)),
    "volumes": _mapping_of(_string),
    "env": _mapping_of(_string, r"[A-Za-z_][A-Za-z0-9_]*"),
    "shm_size": _version(r"\d+[kmgKMG]?", "16g"),
    "gpus": _gpus,
    "jupyter": _bool,
    "sshd": _bool,
}


def _describe(node: yaml.Node | None) -> str:
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    if node is None or node.tag == "tag:yaml.org,2002:null":
        return "nothing"
    return f"'{node.value}'"


def _compose(text: str, source: str) -> yaml.Node:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ProfileError(f"{source}{line}: malformed YAML: {problem}",
                           "check indentation and quoting near that line (YAML uses spaces, not tabs)") from None
    if node is None:
        raise ProfileError(f"{source}: the file is empty", "see the bundled profiles for examples (devenv profiles show local)")
    return node


def parse_host(text: str, name: str, source: str) -> HostProfile:
    ctx = _Ctx(source)
    values = _fields(ctx, _compose(text, source), "", HOST_SCHEMA)
    if values.get("local") and "ssh" in values:
        raise ProfileError(f"{source}: a host cannot be both 'local: true' and have 'ssh'", "remove one of them")
    if not values.get("local") and "ssh" not in values:
        raise ProfileError(f"{source}: field 'ssh' is missing", "add\nssh:\n  alias: <an ~/.ssh/config Host>\n(or 'local: true' for this machine)")
    if values.get("runtime") == "slurm":
        if values.get("local"):
            raise ProfileError(f"{source}: runtime: slurm needs 'ssh' to the cluster's login node, not 'local: true'",
                               "write\nssh:\n  alias: <the login node's ~/.ssh/config Host>")
        values.setdefault("slurm", SlurmSettings())
    elif "slurm" in values:
        raise ProfileError(f"{source}: field 'slurm' is set but runtime is '{values.get('runtime', 'docker')}'",
                           "add runtime: slurm (a Slurm login node), or remove slurm:")
    return HostProfile(name=name, source=source, **values)


def parse_env(text: str, name: str, source: str) -> EnvProfile:
    ctx = _Ctx(source)
    node = _compose(text, source)
    values = _fields(ctx, node, "", ENV_SCHEMA)
    if "image" not in values:
        raise ctx.fail(node, "image", "is missing", "name the image to run, e.g. image: devenv/pytorch:cu128 (with build: to build it)")
    if values.get("torch", "").endswith("+cpu") and values.get("cuda"):
        raise ctx.fail(node, "cuda", f"is {values['cuda']} but torch is a CPU build ({values['torch']})",
                       "drop 'cuda' for a CPU environment, or use a +cuXYZ torch build")
    return EnvProfile(name=name, source=source, **values)


# --- lookup ------------------------------------------------------------------------------------------

def profile_dirs(kind: str) -> list[Path]:
    """Directories searched for a kind, lowest priority first."""
    return [paths.bundled_dir("profiles") / kind, paths.user_profiles_dir() / kind]


def _files(kind: str) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for directory in profile_dirs(kind):
        if directory.is_dir():
            for path in sorted(list(directory.glob("*.yaml")) + list(directory.glob("*.yml"))):
                found[path.stem] = path
    return found


def names(kind: str) -> list[str]:
    return sorted(_files(kind))


def _load(kind: str, name: str, parse: Callable):
    if not _NAME_RE.match(name or ""):
        raise ProfileError(f"'{name}' is not a valid profile name", "use letters, digits, '.', '_' and '-'")
    files = _files(kind)
    if name not in files:
        noun = "host" if kind == "hosts" else "environment"
        known = ", ".join(sorted(files)) or "none"
        raise ProfileError(
            f"unknown {noun} '{name}'",
            f"known {noun}s: {known}. Add {paths.user_profiles_dir() / kind / (name + '.yaml')} "
            f"or see `devenv profiles list`",
        )
    path = files[name]
    try:
        text = path.read_text()
    except OSError as exc:
        raise ProfileError(f"cannot read {path}: {exc.strerror}", "check the file's permissions") from None
    return parse(text, name, str(path))


def load_host(name: str) -> HostProfile:
    return _load("hosts", name, parse_host)


def load_env(name: str) -> EnvProfile:
    return _load("envs", name, parse_env)


def source_of(kind: str, name: str) -> Path | None:
    return _files(kind).get(name)


def validate_file(path: Path, kind: str | None = None) -> HostProfile | EnvProfile:
    """Validate one file; the kind comes from its folder (hosts/ or envs/) unless given."""
    if not path.is_file():
        raise ProfileError(f"{path}: no such file", "give the path of a .yaml profile")
    kind = kind or (path.parent.name if path.parent.name in KINDS else None)
    if kind is None:
        raise ProfileError(f"{path}: cannot tell whether this is a host or an environment profile",
                           "put it under a hosts/ or envs/ folder, or pass --kind hosts|envs")
    parse = parse_host if kind == "hosts" else parse_env
    return parse(path.read_text(), path.stem, str(path))
