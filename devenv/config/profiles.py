"""Host and environment profiles (YAML): loading, validation with file:line:field errors, lookup by name.

Lookup order (later wins, by name): bundled profiles < user profiles ($DEVENV_HOME/profiles, else the XDG
config dir). Validation walks the YAML node tree, so every error names the file, the line and the field.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from enum import Enum
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import yaml

from devenv.cluster.slurm_job import SettingError, SlurmSettings
from devenv.cluster.slurm_job import validate as validate_slurm
from devenv.config import autostop as autostop_config
from devenv.config import paths
from devenv.config import validate as check
from devenv.errors import ProfileError

KINDS = ("hosts", "envs")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
MAX_FILE_BYTES = 256 * 1024       # a profile is a few hundred bytes; more is a mistake (or /dev/zero)
MAX_DEPTH = 16                    # profiles nest three levels; a deep one would exhaust the composer's stack
MAX_NODES = 5000                  # nodes once aliases are expanded: a YAML bomb stops here
# The tags plain YAML resolves by itself; any other (!!python/object, !secret, !!binary) is refused, not dropped.
_PLAIN_TAGS = {f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "map", "seq")}
PORT_NAMES = ("jupyter", "ssh")
# libyaml's parser when PyYAML was built with it (~10x less CPU than the pure-Python one; every devenv command
# and the profile fuzzers parse profiles), else PyYAML's own. Both resolve tags with the same Python resolver.
# The fast one is given only printable ASCII and newlines (a profile's usual text) without the indicators of
# block scalars, tags, directives and reserved characters (| > ! % @ `): on those, and on a tab, a BOM inside the
# text, NEL or controls, the two disagree on some malformed texts (one refuses what the other reads: found by
# tests/test_profiles.py's differential fuzz). Such a text, and any text the fast one refuses, is parsed by the
# pure one, whose error messages profiles report: a profile reads the same either way.
_FAST_TEXT = re.compile(r"[\n\x20\x22-\x24\x26-\x3d\x3f\x41-\x5f\x61-\x7b\x7d\x7e]*")
_Loader = type[yaml.SafeLoader] | type[yaml.CSafeLoader]
FAST_LOADER: _Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


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
    """Where a host's environments live (`runtime:` of a host profile). Only services.environments.registry branches on it."""

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
    autostop: autostop_config.Autostop | None = None   # the host's default for its environments (an env's wins)

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
class MountSpec:
    """A mount of the container beside devenv's volumes: a host path (bind) or a tmpfs."""
    type: str                         # bind | tmpfs
    target: str
    source: str = ""                  # bind: an absolute path on the host (the daemon's machine)
    readonly: bool = False


@dataclass(frozen=True)
class ProjectBuild:
    """A project's Dockerfile (devcontainer.json's build), built on the host before devenv's layer on top."""
    context_dir: str                  # the folder on this machine whose files are the context
    dockerfile: str                   # relative to context_dir's project root, already confined
    tag: str                          # the base image's tag (a digest of the context's content)
    args: dict[str, str] = field(default_factory=dict)
    target: str | None = None
    project_root: str = ""            # the folder the user named (the context never leaves it)


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
    pip: tuple[str, ...] = ()         # pip requirement specs baked into the image (validated: specs only)
    apt: tuple[str, ...] = ()         # Debian/Ubuntu packages baked into the image
    user: str | None = None           # the non-root user exec, ssh, sync and Jupyter run as (made if missing)
    mounts: tuple[MountSpec, ...] = ()          # bind/tmpfs mounts (from a devcontainer.json), checked
    project_build: ProjectBuild | None = None   # a project's own Dockerfile, built first as the base
    autostop: autostop_config.Autostop | None = None   # stop (or down) itself once idle this long (not in the spec)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --- validation over YAML nodes ----------------------------------------------------------------------

class _Ctx:
    """Where we are in a file, so each error says file:line and the field's dotted path. Errors are collected
    (ctx.errors), so one run names every error of the file, not only the first."""

    def __init__(self, source: str):
        self.source = source
        self.errors: list[ProfileError] = []

    def fail(self, node: yaml.Node | None, where: str, problem: str, hint: str) -> ProfileError:
        line = f":{node.start_mark.line + 1}" if node is not None else ""
        field_part = f" field '{where}'" if where else ""
        error = ProfileError(f"{self.source}{line}:{field_part} {problem}", hint)
        error.line = node.start_mark.line + 1 if node is not None else None  # type: ignore[attr-defined]
        return error

    def record(self, exc: ProfileError) -> None:
        self.errors.append(exc)

    def collect(self, parse: Callable[[], _T]) -> tuple[bool, _T | None]:
        """(True, value), or (False, None) once the errors of parse() are recorded."""
        try:
            return True, parse()
        except _Reported:
            return False, None
        except ProfileError as exc:
            self.record(exc)
            return False, None


_T = TypeVar("_T")
# A field's parser: (ctx, its YAML node, its dotted path) -> its value, or ProfileError / _Reported.
FieldParser = Callable[[_Ctx, yaml.Node, str], _T]


class _Reported(Exception):
    """The errors of a nested value are already in ctx.errors: its parent skips it without adding more."""


class ProfileErrors(ProfileError):
    """Several errors in one file, each with its file:line (the first's hint is the hint)."""

    def __init__(self, errors: list[ProfileError]):
        super().__init__("\n".join(e.message for e in errors), errors[0].hint)
        self.errors = errors


def _raise_collected(ctx: _Ctx) -> None:
    """Raise what was collected, in the file's order (errors of the whole file last)."""
    ctx.errors.sort(key=lambda e: getattr(e, "line", None) or 1 << 30)
    if len(ctx.errors) == 1:
        raise ctx.errors[0]
    if ctx.errors:
        raise ProfileErrors(ctx.errors)


def _scalar(ctx: _Ctx, node: yaml.Node, where: str, what: str = "a string") -> str:
    if not isinstance(node, yaml.ScalarNode) or node.tag == "tag:yaml.org,2002:null":
        raise ctx.fail(node, where, f"expected {what}, got {_describe(node)}", f"write {where}: <{what}>")
    text = str(node.value)
    problem = check.text_problem(text)
    if problem:
        raise ctx.fail(node, where, problem, "write the value on one line, without control characters")
    return text


def _string(ctx: _Ctx, node: yaml.Node, where: str) -> str:
    return _scalar(ctx, node, where)


def _checked(problem_of: Callable[[str], str | None], hint: str, optional_empty: bool = False) -> FieldParser[str]:
    """A string field checked by one of config.validate's checks (the error shows only a short preview)."""
    def parse(ctx: _Ctx, node: yaml.Node, where: str) -> str:
        text = _scalar(ctx, node, where)
        if optional_empty and text == "":
            return text
        problem = problem_of(text)
        if problem:
            raise ctx.fail(node, where, f"{check.preview(text)} {problem}", hint)
        return text
    return parse


def _name(ctx: _Ctx, node: yaml.Node, where: str) -> str:
    text = _scalar(ctx, node, where)
    if not _NAME_RE.match(text):
        raise ctx.fail(node, where, f"{check.preview(text)} is not a valid name",
                       "use letters, digits, '.', '_' and '-' (starting with a letter or digit)")
    return text


def _int(ctx: _Ctx, node: yaml.Node, where: str, lo: int = 1, hi: int = 65535) -> int:
    text = _scalar(ctx, node, where, "an integer")
    value = check.parse_int(text, lo, hi)
    if value is None:
        raise ctx.fail(node, where, f"expected an integer from {lo} to {hi}, got {check.preview(text)}",
                       f"e.g. {where}: {lo}")
    return value


def _number(ctx: _Ctx, node: yaml.Node, where: str, hi: float = 1e6) -> float:
    text = _scalar(ctx, node, where, "a number")
    value = check.parse_number(text, 0, hi)
    if value is None:
        raise ctx.fail(node, where, f"expected a positive number up to {hi:g}, got {check.preview(text)}",
                       f"e.g. {where}: 20")
    return value


def _bool(ctx: _Ctx, node: yaml.Node, where: str) -> bool:
    text = _scalar(ctx, node, where, "true or false").lower()
    if text in ("true", "yes", "on"):
        return True
    if text in ("false", "no", "off"):
        return False
    raise ctx.fail(node, where, f"expected true or false, got {check.preview(text)}", f"write {where}: true")


def _choice(*choices: str) -> FieldParser[str]:
    def parse(ctx: _Ctx, node: yaml.Node, where: str) -> str:
        text = _scalar(ctx, node, where, " or ".join(choices))
        if text not in choices:
            raise ctx.fail(node, where, f"expected one of {', '.join(choices)}, got {check.preview(text)}",
                           f"write {where}: {choices[0]}")
        return text
    return parse


def _version(pattern: str, example: str) -> FieldParser[str]:
    def parse(ctx: _Ctx, node: yaml.Node, where: str) -> str:
        text = _scalar(ctx, node, where, "a version string")
        if not re.fullmatch(pattern, text):
            raise ctx.fail(node, where, f"expected a version like '{example}', got {check.preview(text)}",
                           f'write {where}: "{example}" (quoted, so YAML keeps it a string)')
        return text
    return parse


def _list_of_strings(ctx: _Ctx, node: yaml.Node, where: str,
                     item: FieldParser[str] | None = None) -> tuple[str, ...]:
    """A list of strings; a single comma-separated string is accepted too (as ProxyJump writes it)."""
    parse_item = item or _string
    if isinstance(node, yaml.ScalarNode):
        parts = [p.strip() for p in _scalar(ctx, node, where).split(",") if p.strip()]
        for part in parts:
            parse_item(ctx, yaml.ScalarNode("tag:yaml.org,2002:str", part, node.start_mark, node.end_mark), where)
        return tuple(parts)
    if not isinstance(node, yaml.SequenceNode):
        raise ctx.fail(node, where, f"expected a list, got {_describe(node)}", f"write {where}: [a, b]")
    results = [ctx.collect(partial(parse_item, ctx, n, f"{where}[{i}]")) for i, n in enumerate(node.value)]
    if not all(ok for ok, _ in results):
        raise _Reported()
    return tuple(value for _, value in results if value is not None)  # each is, once all parsed


def _list_of(item: FieldParser[str]) -> FieldParser[tuple[str, ...]]:
    return lambda ctx, node, where: _list_of_strings(ctx, node, where, item)


def _jump_problem(value: str) -> str | None:
    """One ProxyJump hop: [user@]host[:port], each part checked."""
    problem = check.option_problem(value)
    if problem:
        return problem
    match = re.fullmatch(r"(?:([^@]*)@)?(\[[^\]]*\]|[^:]*)(?::([0-9]{1,5}))?", value)
    if not match:
        return "is not [user@]host[:port]"
    user, host, port = match.groups()
    if user is not None and check.user_problem(user):
        return f"has a bad user ({check.user_problem(user)})"
    if check.hostname_problem(host) and check.alias_problem(host):
        return "has a bad host name"
    if port is not None and check.parse_int(port, 1, 65535) is None:
        return "has a port outside 1-65535"
    return None


def _mapping_of(value_parser: FieldParser[_T],
                key_pattern: str = r"[A-Za-z_][A-Za-z0-9_.-]*") -> FieldParser[dict[str, _T]]:
    def parse(ctx: _Ctx, node: yaml.Node, where: str) -> dict[str, _T]:
        if not isinstance(node, yaml.MappingNode):
            raise ctx.fail(node, where, f"expected a mapping, got {_describe(node)}", f"write {where}: {{name: value}}")
        out: dict[str, _T] = {}
        failed = False
        for key_node, value_node in node.value:
            def entry(key_node: yaml.Node = key_node, value_node: yaml.Node = value_node) -> tuple[str, _T]:
                key = _string(ctx, key_node, where)
                if not re.fullmatch(key_pattern, key) or len(key) > 128:
                    raise ctx.fail(key_node, where, f"{check.preview(key)} is not a valid name",
                                   "use letters, digits, _ . -")
                if key in out:
                    raise ctx.fail(key_node, f"{where}.{key}", "appears twice", "keep one")
                return key, value_parser(ctx, value_node, f"{where}.{key}")
            ok, pair = ctx.collect(entry)
            if pair is not None:
                out[pair[0]] = pair[1]
            failed = failed or not ok
        if failed:
            raise _Reported()
        return out
    return parse


def _gpus(ctx: _Ctx, node: yaml.Node, where: str) -> str:
    """all | none | N (N free GPUs, picked at `up`) | [0, 1] / "0,1" / device=1 (those GPUs): devenv.gpu.choose."""
    from devenv.gpu.choose import parse_gpus

    if isinstance(node, yaml.SequenceNode):
        if not node.value:
            raise ctx.fail(node, where, "is an empty list", f"write {where}: none (no GPU), all, or [0, 1]")
        ids = [_int(ctx, n, f"{where}[{i}]", 0, 1023) for i, n in enumerate(node.value)]
        if len(set(ids)) != len(ids):
            raise ctx.fail(node, where, "names a GPU twice", "list each index once")
        return ",".join(str(i) for i in ids)
    text = _scalar(ctx, node, where, "'all', 'none', a count or GPU indices")
    if len(text) > 64 or not text.isascii():
        raise ctx.fail(node, where, f"expected all, none, a count or GPU indices, got {check.preview(text)}",
                       f"write {where}: all, {where}: 2 (two free GPUs) or {where}: [0, 1]")
    try:
        return parse_gpus(text)
    except ValueError as e:
        problem = str(e).replace(f"'{text}'", check.preview(text))  # the value shown as a short prefix only
        raise ctx.fail(node, where, problem, f"write {where}: all, {where}: 2 (two free GPUs) or {where}: [0, 1]") \
            from None


def _ports(ctx: _Ctx, node: yaml.Node, where: str) -> dict[str, int]:
    # names that are not even names are _mapping_of's to report; a name shown is short (never echoed whole)
    unknown = [k for k, _ in (node.value if isinstance(node, yaml.MappingNode) else [])
               if isinstance(k, yaml.ScalarNode) and k.value not in PORT_NAMES
               and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]{0,127}", str(k.value))]
    for key_node in unknown:
        name = str(key_node.value)
        ctx.record(ctx.fail(key_node, f"{where}.{name if len(name) <= 20 else check.preview(name)}",
                            "is not a service devenv publishes", f"known: {', '.join(PORT_NAMES)}"))
    ports = _mapping_of(lambda c, n, w: _int(c, n, w, 1, 65535))(ctx, node, where)
    if unknown:
        raise _Reported()
    if len(set(ports.values())) != len(ports):
        raise ctx.fail(node, where, "gives two services the same port", "give each service its own port")
    return ports


_SHM_UNITS = {"": 1, "k": 1024, "m": 1024 ** 2, "g": 1024 ** 3}


def _shm_size(ctx: _Ctx, node: yaml.Node, where: str) -> str:
    text = _scalar(ctx, node, where, "a size like 16g")
    match = re.fullmatch(r"([0-9]{1,7})([kmgKMG]?)", text)
    size = int(match.group(1)) * _SHM_UNITS[match.group(2).lower()] if match else 0
    if not match or not 1024 ** 2 <= size <= 1024 ** 4:
        raise ctx.fail(node, where, f"expected a size from 1m to 1024g, got {check.preview(text)}",
                       f'write {where}: "16g"')
    return text


def _fields(ctx: _Ctx, node: yaml.Node, where: str, schema: dict[str, FieldParser[object]],
            nested: bool = True) -> dict[str, Any]:
    """Check a mapping against a schema: unknown fields are errors that list the known ones. Every field's
    error is recorded; a nested mapping with errors raises _Reported after checking all of its fields (the
    top level, nested=False, returns what parsed and leaves the failed keys out)."""
    if not isinstance(node, yaml.MappingNode):
        raise ctx.fail(node, where, f"expected a mapping, got {_describe(node)}", "see profiles/ for examples")
    out: dict[str, Any] = {}
    before = len(ctx.errors)
    seen: set[str] = set()
    for key_node, value_node in node.value:
        def one(key_node: yaml.Node = key_node, value_node: yaml.Node = value_node) -> tuple[str, object]:
            key = _string(ctx, key_node, where)
            path = f"{where}.{key}" if where else key
            if key not in schema:
                shown = key if re.fullmatch(r"[\w.-]{1,40}", key, re.ASCII) else check.preview(key)
                path = f"{where}.{shown}" if where else shown
                close = [k for k in schema if key and k.startswith(key[:3])]
                suggestion = f"did you mean '{close[0]}'? " if close else ""
                raise ctx.fail(key_node, path, "is not a known field",
                               f"{suggestion}known fields: {', '.join(sorted(schema))}")
            if key in seen:
                raise ctx.fail(key_node, path, "appears twice", "keep one")
            seen.add(key)
            return key, schema[key](ctx, value_node, path)
        _, pair = ctx.collect(one)
        if pair is not None:
            out[pair[0]] = pair[1]
    if nested and len(ctx.errors) > before:
        raise _Reported()
    return out


def _ssh_target(ctx: _Ctx, node: yaml.Node, where: str) -> SSHTarget:
    values = _fields(ctx, node, where, {
        "alias": _checked(check.alias_problem, "the Host name of an ~/.ssh/config entry, e.g. gpu-box"),
        "hostname": _checked(check.hostname_problem, "a host name or IP address, e.g. gpu1.lab.example"),
        "user": _checked(check.user_problem, "a login name, e.g. alice"),
        "port": _int,
        "identity_file": _checked(check.path_problem, "the path of a private key file, e.g. ~/.ssh/id_ed25519"),
        "proxy_jump": _list_of(_checked(_jump_problem, "each hop is [user@]host[:port], e.g. bastion")),
        "connect_timeout": lambda c, n, w: _number(c, n, w, 3600),
    })
    if not values.get("alias") and not values.get("hostname"):
        raise ctx.fail(node, where, "needs 'alias' (an ~/.ssh/config Host) or 'hostname'",
                       f"e.g.\n  {where}:\n    alias: my-gpu-box")
    return SSHTarget(**values)


def _build(ctx: _Ctx, node: yaml.Node, where: str) -> BuildSpec:
    values = _fields(ctx, node, where, {
        "dockerfile": _checked(check.path_problem, "the name of a Dockerfile under images/ (e.g. pytorch.Dockerfile)"),
        "args": _mapping_of(_string, r"[A-Za-z_][A-Za-z0-9_]*")})
    if "dockerfile" not in values:
        raise ctx.fail(node, where, "needs 'dockerfile' (a file under images/)", f"e.g. {where}: {{dockerfile: pytorch.Dockerfile}}")
    return BuildSpec(**values)


def _slurm(ctx: _Ctx, node: yaml.Node, where: str) -> SlurmSettings:
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
        problem = exc.problem if exc.value is None else f"{check.preview(exc.value)} {exc.problem}"
        raise ctx.fail(field_node, f"{where}.{exc.field}", problem, exc.hint) from None


def _autostop(ctx: _Ctx, node: yaml.Node, where: str) -> autostop_config.Autostop:
    """`autostop: 90m`, or a mapping {idle: 90m, action: stop|down, hook: CMD, gpu_threshold: 5, sample: 30s}."""
    try:
        if isinstance(node, yaml.MappingNode):
            values = _fields(ctx, node, where, {
                "idle": _string, "action": _choice(*autostop_config.ACTIONS), "hook": _string,
                "gpu_threshold": lambda c, n, w: _number(c, n, w, 100), "sample": _string})
            if "idle" not in values:
                raise ctx.fail(node, where, "needs 'idle' (the window, e.g. 90m)", f"e.g. {where}: {{idle: 90m}}")
            setting = autostop_config.Autostop(
                autostop_config.parse_duration(values["idle"], where), values.get("action", "stop"),
                values.get("hook"), float(values.get("gpu_threshold", 5.0)),
                autostop_config.parse_duration(values["sample"], where) if "sample" in values else None)
        else:
            setting = autostop_config.Autostop(autostop_config.parse_duration(_scalar(ctx, node, where), where))
        return autostop_config.validate(setting, where)
    except autostop_config.AutostopError as exc:
        raise ctx.fail(node, where, exc.message.split(": ", 1)[-1], exc.hint or "") from None


HOST_SCHEMA: dict[str, FieldParser[object]] = {
    "description": _string,
    "local": _bool,
    "ssh": _ssh_target,
    "runtime": _choice("docker", "host", "slurm", "auto"),
    "python": _checked(check.program_problem, "a python on the host, e.g. python3 or /opt/conda/bin/python"),
    "default_env": _name,
    "groups": _list_of(_name),
    "engine": _choice("auto", "docker", "podman"),
    "gpu_devices": _choice("auto", "toolkit", "cdi"),
    "slurm": _slurm,
    "autostop": _autostop,
}

ENV_SCHEMA: dict[str, FieldParser[object]] = {
    "description": _string,
    "image": _checked(check.image_problem, "e.g. image: devenv/pytorch:cu128"),
    "build": _build,
    "cuda": _version(r"\d+\.\d+(\.\d+)?", "12.8"),
    "torch": _version(r"\d+\.\d+(\.\d+)?(\+(cu\d+|cpu|rocm[\d.]+))?", "2.8.0+cu128"),
    "image_size_gb": _number,
    "ports": _ports,
    "volumes": _mapping_of(_checked(check.volume_path_problem, "e.g. workspace: /workspace")),
    "env": _mapping_of(_string, r"[A-Za-z_][A-Za-z0-9_]*"),
    "shm_size": _shm_size,
    "gpus": _gpus,
    "jupyter": _bool,
    "sshd": _bool,
    "pip": _list_of(_checked(check.pip_spec_problem, "a requirement like numpy, numpy==2.1.0 or rich>=13,<14")),
    "apt": _list_of(_checked(check.apt_package_problem, "a package like ffmpeg or libsndfile1=1.2.0-1")),
    "user": _checked(check.user_problem, "a login name, e.g. user: dev (made in the image if missing)"),
    "autostop": _autostop,
}


def _describe(node: yaml.Node | None) -> str:
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    if node is None or node.tag == "tag:yaml.org,2002:null":
        return "nothing"
    return check.preview(node.value)


def _shape(text: str, source: str, loader: _Loader) -> None:
    """Depth first, from the parser's events (the composer recurses and would overflow on deep nesting)."""
    depth = 0
    try:
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    line = event.start_mark.line + 1 if event.start_mark else 0
                    raise ProfileError(f"{source}:{line}: nested more than {MAX_DEPTH} levels deep",
                                       "a profile nests a few levels (see the bundled profiles)")
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
    except yaml.YAMLError:
        return  # reported with its line by _compose


def _check_tree(node: yaml.Node, source: str) -> None:
    """Refuse tags plain YAML does not resolve by itself, and trees that aliases blow up (a YAML bomb)."""
    stack, seen = [node], 0
    tagged: list[ProfileError] = []
    while stack:
        current = stack.pop()
        seen += 1
        if seen > MAX_NODES:
            raise ProfileError(f"{source}: more than {MAX_NODES} values once anchors and aliases are expanded",
                               "a profile is small; remove the aliases (*name) that repeat large parts")
        if current.tag not in _PLAIN_TAGS:
            error = ProfileError(f"{source}:{current.start_mark.line + 1}: YAML tag {check.preview(current.tag, 40)} "
                                 "is not supported", "remove the tag (!...); profiles hold plain strings, numbers, "
                                 "lists and mappings")
            error.line = current.start_mark.line + 1  # type: ignore[attr-defined]
            tagged.append(error)
        if isinstance(current, yaml.MappingNode):
            for key, value in current.value:
                stack += [key, value]
        elif isinstance(current, yaml.SequenceNode):
            stack += current.value
    if tagged:  # every tag of the file, in its order
        ctx = _Ctx(source)
        ctx.errors = tagged
        _raise_collected(ctx)


def _compose(text: str, source: str) -> yaml.Node:
    if FAST_LOADER is not yaml.SafeLoader and _FAST_TEXT.fullmatch(text):
        try:
            _shape(text, source, FAST_LOADER)
            node = yaml.compose(text, Loader=FAST_LOADER)
        except (yaml.YAMLError, RecursionError):
            pass  # reported below, in the pure parser's words
        else:
            if node is not None:
                _check_tree(node, source)
                return node
    _shape(text, source, yaml.SafeLoader)
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except RecursionError:
        raise ProfileError(f"{source}: nested too deeply", "a profile nests a few levels") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ProfileError(f"{source}{line}: malformed YAML: {problem}",
                           "check indentation and quoting near that line (YAML uses spaces, not tabs)") from None
    if node is None:
        raise ProfileError(f"{source}: the file is empty", "see the bundled profiles for examples (devenv profiles show local)")
    _check_tree(node, source)
    return node


def _present(node: yaml.Node, key: str) -> bool:
    """The mapping has key, whether or not its value parsed (a failed one is already reported)."""
    return _key_node(node, key) is not None


def _key_node(node: yaml.Node, key: str) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.value == key:
                return key_node
    return None


def parse_host(text: str, name: str, source: str) -> HostProfile:
    ctx = _Ctx(source)
    node = _compose(text, source)
    values = _fields(ctx, node, "", HOST_SCHEMA, nested=False)
    has_ssh = _present(node, "ssh")
    if values.get("local") and has_ssh:
        ctx.record(ctx.fail(_key_node(node, "ssh"), "ssh", "is set, but the host is 'local: true'",
                            "a host cannot be both 'local: true' and have 'ssh': remove one of them"))
    if not values.get("local") and not has_ssh and not _present(node, "local"):
        ctx.record(ProfileError(f"{source}: field 'ssh' is missing",
                                "add\nssh:\n  alias: <an ~/.ssh/config Host>\n(or 'local: true' for this machine)"))
    if values.get("runtime") == "slurm":
        if values.get("local"):
            ctx.record(ctx.fail(_key_node(node, "runtime"), "runtime",
                                "slurm needs 'ssh' to the cluster's login node, not 'local: true'",
                                "write\nssh:\n  alias: <the login node's ~/.ssh/config Host>"))
        values.setdefault("slurm", SlurmSettings())
    elif "slurm" in values and not ctx.errors:
        ctx.record(ctx.fail(_key_node(node, "slurm"), "slurm",
                            f"is set but runtime is '{values.get('runtime', 'docker')}'",
                            "add runtime: slurm (a Slurm login node), or remove slurm:"))
    _raise_collected(ctx)
    return HostProfile(name=name, source=source, **values)


def parse_env(text: str, name: str, source: str) -> EnvProfile:
    ctx = _Ctx(source)
    node = _compose(text, source)
    values = _fields(ctx, node, "", ENV_SCHEMA, nested=False)
    if not _present(node, "image"):
        ctx.record(ctx.fail(node, "image", "is missing",
                            "name the image to run, e.g. image: devenv/pytorch:cu128 (with build: to build it)"))
    if values.get("torch", "").endswith("+cpu") and values.get("cuda"):
        ctx.record(ctx.fail(_key_node(node, "cuda"), "cuda",
                            f"is {values['cuda']} but torch is a CPU build ({values['torch']})",
                            "drop 'cuda' for a CPU environment, or use a +cuXYZ torch build"))
    if not _present(node, "build"):
        for key in ("pip", "apt", "user"):
            if _present(node, key):
                ctx.record(ctx.fail(_key_node(node, key), key, "needs a build: section (it is baked into the "
                                    "image devenv builds; a pulled image cannot get it)",
                                    "add build: {dockerfile: pytorch.Dockerfile, args: {...}}"))
    _raise_collected(ctx)
    if values.get("user") == "root":
        values["user"] = None   # root is the default: the same image and container as without it
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


def _load(kind: str, name: str, parse: Callable[[str, str, str], _T]) -> _T:
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
    return parse(read_text(path), name, str(path))


def read_text(path: Path) -> str:
    """A profile's text: a regular file (never a FIFO or a device), at most MAX_FILE_BYTES, UTF-8."""
    try:
        data = paths.read_regular_file(path, MAX_FILE_BYTES)
    except paths.NotRegularFile:
        raise ProfileError(f"{path}: not a regular file (a FIFO, a device or a folder)",
                           "a profile is a .yaml file; replace the link or pipe with the file itself") from None
    except paths.FileTooLarge:
        raise ProfileError(f"{path}: larger than {MAX_FILE_BYTES // 1024} KiB", "a profile is a small YAML file") from None
    except OSError as exc:
        raise ProfileError(f"cannot read {path}: {exc.strerror}", "check the file's permissions") from None
    return decode(data, str(path))


def decode(data: bytes, source: str) -> str:
    if data.startswith((b"\xff\xfe", b"\xfe\xff")) or (len(data) > 1 and b"\x00" in data[:2]):
        raise ProfileError(f"{source}: the file is UTF-16, not UTF-8", "save it as UTF-8")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise ProfileError(f"{source}:{line}: not UTF-8 text (byte {exc.start})", "save the file as UTF-8") from None
    if "\0" in text:
        line = text[:text.index("\0")].count("\n") + 1
        raise ProfileError(f"{source}:{line}: holds a NUL character", "a profile is plain text") from None
    return text


def load_host(name: str) -> HostProfile:
    return _load("hosts", name, parse_host)


def load_env(name: str) -> EnvProfile:
    return _load("envs", name, parse_env)


def source_of(kind: str, name: str) -> Path | None:
    return _files(kind).get(name)


def validate_file(path: Path, kind: str | None = None) -> HostProfile | EnvProfile:
    """Validate one file; the kind comes from its folder (hosts/ or envs/) unless given."""
    problem = check.local_path_problem(str(path))
    if problem:
        raise ProfileError(f"{check.preview(str(path))} {problem}", "give the path of a .yaml profile")
    if not path.exists():
        raise ProfileError(f"{path}: no such file", "give the path of a .yaml profile")
    kind = kind or (path.parent.name if path.parent.name in KINDS else None)
    if kind is None:
        raise ProfileError(f"{path}: cannot tell whether this is a host or an environment profile",
                           "put it under a hosts/ or envs/ folder, or pass --kind hosts|envs")
    parse = parse_host if kind == "hosts" else parse_env
    return parse(read_text(path), path.stem, str(path))
