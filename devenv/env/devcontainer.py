"""A project's .devcontainer/devcontainer.json read into what devenv can honour, and a list of what it cannot.

devenv's own needs (GPU, Jupyter, sshd, ports on the host's loopback) are laid on top: the devcontainer's image
(or the image its Dockerfile builds) becomes the base devenv's image is built FROM. Paths in `build` are
relative to the devcontainer.json's folder and must stay inside the project (the folder above .devcontainer),
the explicit directory the user named (L0: reads nothing but the text it is given).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath
from typing import Any

from devenv.config.profiles import BuildSpec, EnvProfile
from devenv.env import jsonc
from devenv.errors import ProfileError

# Keys devenv reads; everything else in the file is named as not honoured.
HONOURED = {"name", "image", "build", "forwardPorts", "containerEnv", "remoteEnv", "mounts", "postCreateCommand",
            "postStartCommand", "remoteUser", "workspaceFolder", "$schema", "customizations"}
IGNORED_QUIETLY = {"customizations", "$schema", "name"}  # editor settings: VS Code reads them itself


@dataclass(frozen=True)
class Devcontainer:
    source: str
    name: str = ""
    image: str | None = None
    dockerfile: str | None = None           # relative to the project root, after confinement
    context: str = "."                      # relative to the project root
    build_args: dict[str, str] = field(default_factory=dict)
    forward_ports: tuple[int, ...] = ()
    container_env: dict[str, str] = field(default_factory=dict)
    remote_env: dict[str, str] = field(default_factory=dict)
    mounts: tuple[str, ...] = ()
    post_create: tuple[str, ...] = ()       # shell commands, in order
    post_start: tuple[str, ...] = ()
    remote_user: str | None = None
    workspace_folder: str | None = None
    not_honoured: tuple[str, ...] = ()      # "key: why", shown by `up`

    @property
    def env(self) -> dict[str, str]:
        """containerEnv, then remoteEnv over it (devenv's sessions see both)."""
        return {**self.container_env, **self.remote_env}


def parse(text: str, source: str, devcontainer_dir: str = ".devcontainer") -> Devcontainer:
    """devcontainer.json's text; devcontainer_dir: its folder relative to the project root."""
    data = jsonc.loads(text, source)
    if not isinstance(data, dict):
        raise ProfileError(f"{source}: the file is not a JSON object", "see containers.dev/implementors/json_reference")
    notes = [f"{key}: not supported by devenv" for key in sorted(data) if key not in HONOURED]
    if "${" in text:
        notes.append("${...} variables: not substituted (their text is used as written)")
    image = _opt_str(data, "image", source)
    build = data.get("build")
    dockerfile, context, args = None, ".", {}
    if build is not None:
        if not isinstance(build, dict):
            raise ProfileError(f"{source}: build must be an object", 'e.g. "build": {"dockerfile": "Dockerfile"}')
        notes += [f"build.{k}: not supported by devenv" for k in sorted(build)
                  if k not in ("dockerfile", "context", "args")]
        if "dockerfile" in build:
            dockerfile = _inside(devcontainer_dir, _str(build["dockerfile"], "build.dockerfile", source), source)
            context = _inside(devcontainer_dir, _str(build.get("context", "."), "build.context", source), source)
        args = _str_map(build.get("args", {}), "build.args", source)
    if image is None and dockerfile is None:
        raise ProfileError(f"{source}: neither image nor build.dockerfile", 'add "image": "..." or a build')
    ports = []
    for p in data.get("forwardPorts", []):
        if isinstance(p, int) and 0 < p < 65536:
            ports.append(p)
        else:
            notes.append(f"forwardPorts {p!r}: only local port numbers are supported")
    mounts = []
    for m in data.get("mounts", []):
        if isinstance(m, str):
            mounts.append(m)
        else:
            notes.append("mounts: only the string form (type=...,source=...,target=...) is supported")
    return Devcontainer(
        source=source, name=str(data.get("name", "")), image=image, dockerfile=dockerfile, context=context,
        build_args=args, forward_ports=tuple(ports),
        container_env=_str_map(data.get("containerEnv", {}), "containerEnv", source),
        remote_env=_str_map(data.get("remoteEnv", {}), "remoteEnv", source), mounts=tuple(mounts),
        post_create=_commands(data.get("postCreateCommand"), "postCreateCommand", source),
        post_start=_commands(data.get("postStartCommand"), "postStartCommand", source),
        remote_user=_opt_str(data, "remoteUser", source),
        workspace_folder=_opt_str(data, "workspaceFolder", source), not_honoured=tuple(notes))


def _inside(base: str, relative: str, source: str) -> str:
    """base/relative, normalised, refused when it leaves the project root (the build context stays confined)."""
    parts: list[str] = []
    for part in (PurePosixPath(base) / relative).parts:
        if part == "..":
            if not parts:
                raise ProfileError(f"{source}: {relative!r} leaves the project folder",
                                   "keep the Dockerfile and build context inside the project")
            parts.pop()
        elif part not in (".", ""):
            parts.append(part)
    if PurePosixPath(relative).is_absolute():
        raise ProfileError(f"{source}: {relative!r} is an absolute path", "give it relative to devcontainer.json")
    return "/".join(parts) or "."


def _commands(value: Any, key: str, source: str) -> tuple[str, ...]:
    """A command as a string, an argv list (quoted into one line) or an object of named commands."""
    import shlex

    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(a, str) for a in value):
        return (shlex.join(value),)
    if isinstance(value, dict):
        return tuple(c for v in value.values() for c in _commands(v, key, source))
    raise ProfileError(f"{source}: {key} must be a string, a list of strings or an object", f"see {key} in the spec")


def _str(value: Any, key: str, source: str) -> str:
    if not isinstance(value, str) or not value or "\n" in value or "\0" in value:
        raise ProfileError(f"{source}: {key} must be a one-line string", f"fix {key}")
    return value


def _opt_str(data: dict, key: str, source: str) -> str | None:
    return _str(data[key], key, source) if key in data else None


def _str_map(value: Any, key: str, source: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ProfileError(f"{source}: {key} must be an object of strings", f"fix {key}")
    out = {}
    for k, v in value.items():
        if not isinstance(k, str) or not k.replace("_", "").isalnum() or not isinstance(v, (str, int, float, bool)):
            raise ProfileError(f"{source}: {key}.{k} is not a NAME: value pair", f"fix {key}")
        out[k] = str(v).lower() if isinstance(v, bool) else str(v)
    return out


def overlay(env: EnvProfile, dc: Devcontainer) -> tuple[EnvProfile, list[str]]:
    """env with the devcontainer laid under devenv's needs: its image as the base devenv's image is built FROM
    (Jupyter, sshd and the ready probe come from devenv's Dockerfile), its environment variables; and the notes
    on what is not honoured (to print)."""
    import hashlib

    notes = list(dc.not_honoured)
    if dc.dockerfile is not None:
        notes.append("build.dockerfile: not yet built by devenv; give the image it builds as \"image\"")
    if dc.mounts:
        notes.append("mounts: not yet mounted by devenv (the workspace volume is)")
    if dc.remote_user not in (None, "root"):
        notes.append(f"remoteUser {dc.remote_user}: devenv's sshd and exec run as root")
    if dc.workspace_folder not in (None, env.volumes.get("workspace")):
        notes.append(f"workspaceFolder {dc.workspace_folder}: the workspace is {env.volumes.get('workspace')}")
    if dc.image is None:
        raise ProfileError(f"{dc.source}: devenv needs an \"image\" (a Dockerfile build is not supported yet)",
                           "build it yourself and name it as \"image\"")
    dockerfile = env.build.dockerfile if env.build else "pytorch.Dockerfile"
    args = {**(env.build.args if env.build else {}), **dc.build_args, "BASE_IMAGE": dc.image}
    digest = hashlib.sha256(repr((env.image, dockerfile, sorted(args.items()))).encode()).hexdigest()[:12]
    slug = "".join(c if c.isalnum() or c in "-_." else "-" for c in (dc.name or env.name).lower()).strip("-.")
    return replace(env, image=f"devenv-dc/{slug or 'project'}:{digest}", build=BuildSpec(dockerfile, args),
                   env={**env.env, **dc.env}), notes
