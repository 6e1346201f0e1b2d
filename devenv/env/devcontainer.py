"""A project's .devcontainer/devcontainer.json read into what devenv can honour, and a list of what it cannot.

devenv's own needs (GPU, Jupyter, sshd, ports on the host's loopback) are laid on top: the devcontainer's image
(or the image its Dockerfile builds) becomes the base devenv's image is built FROM. Paths in `build` are
relative to the devcontainer.json's folder and must stay inside the project (the folder above .devcontainer),
the explicit directory the user named (L0: reads nothing but the text it is given).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath
from typing import Any

from devenv.config import validate
from devenv.config.profiles import BuildSpec, EnvProfile, MountSpec, ProjectBuild
from devenv.env import jsonc
from devenv.errors import ProfileError

# Keys devenv reads; everything else in the file is named as not honoured.
HONOURED = {"name", "image", "build", "dockerFile", "context", "forwardPorts", "containerEnv", "remoteEnv",
            "mounts", "onCreateCommand", "updateContentCommand", "postCreateCommand", "postStartCommand",
            "postAttachCommand",
            "remoteUser", "containerUser", "workspaceFolder",
            "$schema", "customizations"}
IGNORED_QUIETLY = {"customizations", "$schema", "name"}  # editor settings: VS Code reads them itself

# Host paths a project's devcontainer.json may never bind into the container: the system, every user's homes,
# the container engines' state and sockets (each is root on the host), credentials anywhere.
_SYSTEM_TREES = ("/etc", "/root", "/boot", "/proc", "/sys", "/dev", "/run", "/var/run", "/var/lib", "/usr",
                 "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/snap")
_NOT_WHOLE = ("/", "/home", "/var", "/mnt", "/media", "/opt", "/srv", "/tmp", "/data", "/nfs", "/scratch")
_CREDENTIALS = {".ssh", ".gnupg", ".aws", ".azure", ".docker", ".kube", ".netrc", ".git-credentials",
                ".password-store", ".vault-token", ".config"}
# Where devenv's own files live in the container: a mount there would replace sshd's or Jupyter's setup.
_DEVENV_TARGETS = ("/etc/devenv", "/etc/ssh", "/etc/jupyter", "/opt/venv", "/usr/local/bin", "/proc", "/sys",
                   "/dev", "/run", "/etc/passwd", "/etc/shadow", "/etc/group")
_VOLUME_NAME = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}"


@dataclass(frozen=True)
class Devcontainer:
    source: str
    name: str = ""
    image: str | None = None
    dockerfile: str | None = None           # relative to the project root, after confinement
    context: str = "."                      # relative to the project root
    build_args: dict[str, str] = field(default_factory=dict)
    target: str | None = None               # build.target: the Dockerfile's stage
    forward_ports: tuple[int, ...] = ()
    container_env: dict[str, str] = field(default_factory=dict)
    remote_env: dict[str, str] = field(default_factory=dict)
    mounts: tuple[MountSpec, ...] = ()      # binds (host paths of the GPU host) and tmpfs, checked
    volumes: dict[str, str] = field(default_factory=dict)   # named volume -> target: the environment's own
    on_create: tuple[str, ...] = ()         # shell commands, in order: onCreate, updateContent, postCreate
    update_content: tuple[str, ...] = ()
    post_create: tuple[str, ...] = ()
    post_start: tuple[str, ...] = ()
    post_attach: tuple[str, ...] = ()       # each `up` that attaches (made, started or reattached)
    remote_user: str | None = None          # remoteUser, else containerUser (None: root)
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
    dockerfile, context, args, target = None, ".", {}, None
    if "dockerFile" in data:  # the spec's older spelling, beside a top-level "context"
        build = {"dockerfile": data["dockerFile"], **({"context": data["context"]} if "context" in data else {}),
                 **(build if isinstance(build, dict) else {})}
    if build is not None:
        if not isinstance(build, dict):
            raise ProfileError(f"{source}: build must be an object", 'e.g. "build": {"dockerfile": "Dockerfile"}')
        notes += [f"build.{k}: not supported by devenv" for k in sorted(build)
                  if k not in ("dockerfile", "context", "args", "target")]
        if "dockerfile" in build:
            dockerfile = _inside(devcontainer_dir, _str(build["dockerfile"], "build.dockerfile", source), source)
            context = _inside(devcontainer_dir, _str(build.get("context", "."), "build.context", source), source)
        args = _str_map(build.get("args", {}), "build.args", source)
        if "target" in build:
            target = _str(build["target"], "build.target", source)
            if validate.option_problem(target) or not target.replace("-", "").replace("_", "").replace(".", "")\
                    .isalnum():
                raise ProfileError(f"{source}: build.target {validate.preview(target)} is not a stage name",
                                   "name a FROM ... AS <stage> of the Dockerfile")
    if image is None and dockerfile is None:
        raise ProfileError(f"{source}: neither image nor build.dockerfile", 'add "image": "..." or a build')
    if image is not None and dockerfile is not None:
        notes.append("image: not used (build.dockerfile is built instead)")
        image = None
    if image is not None and validate.image_problem(image):
        raise ProfileError(f"{source}: image {validate.preview(image, 40)} {validate.image_problem(image)}",
                           "give an image reference like mcr.microsoft.com/devcontainers/python:3")
    ports = []
    raw_ports = data.get("forwardPorts", [])
    if not isinstance(raw_ports, list):
        raise ProfileError(f"{source}: forwardPorts must be a list of port numbers", 'e.g. "forwardPorts": [6006]')
    for p in raw_ports:
        if isinstance(p, int) and not isinstance(p, bool) and 0 < p < 65536:
            ports.append(p)
        else:
            notes.append(f"forwardPorts {validate.preview(p)}: only local port numbers are supported")
    mounts: list[MountSpec] = []
    volumes: dict[str, str] = {}
    raw_mounts = data.get("mounts", [])
    if not isinstance(raw_mounts, list):
        raise ProfileError(f"{source}: mounts must be a list", 'e.g. "mounts": ["type=bind,source=/data,target=/data"]')
    for raw in raw_mounts:
        parsed = parse_mount(raw, source, notes)
        if isinstance(parsed, MountSpec):
            mounts.append(parsed)
        elif parsed is not None:
            volumes[parsed[0]] = parsed[1]
    user = _opt_str(data, "remoteUser", source)
    container_user = _opt_str(data, "containerUser", source)
    for key, value in (("remoteUser", user), ("containerUser", container_user)):
        if value is not None and validate.user_problem(value):
            raise ProfileError(f"{source}: {key} {validate.preview(value)} {validate.user_problem(value)}",
                               f"name a user of the image (or one devenv may create), e.g. \"{key}\": \"dev\"")
    if container_user not in (None, "root"):
        notes.append(f"containerUser {container_user}: sshd runs as root (it must, to admit the user); Jupyter, "
                     f"exec, ssh and sync run as {user or container_user}")
    user = user or container_user
    return Devcontainer(
        source=source, name=str(data.get("name", "")), image=image, dockerfile=dockerfile, context=context,
        build_args=args, target=target, forward_ports=tuple(ports),
        container_env=_str_map(data.get("containerEnv", {}), "containerEnv", source),
        remote_env=_str_map(data.get("remoteEnv", {}), "remoteEnv", source), mounts=tuple(mounts),
        volumes=volumes,
        on_create=_commands(data.get("onCreateCommand"), "onCreateCommand", source),
        update_content=_commands(data.get("updateContentCommand"), "updateContentCommand", source),
        post_create=_commands(data.get("postCreateCommand"), "postCreateCommand", source),
        post_start=_commands(data.get("postStartCommand"), "postStartCommand", source),
        post_attach=_commands(data.get("postAttachCommand"), "postAttachCommand", source),
        remote_user=None if user == "root" else user,
        workspace_folder=_opt_str(data, "workspaceFolder", source), not_honoured=tuple(notes))


def parse_mount(raw: Any, source: str, notes: list[str]) -> MountSpec | tuple[str, str] | None:
    """One entry of "mounts" (the string "type=bind,source=/data,target=/data,readonly" or the object
    {"type", "source", "target"}): a MountSpec (bind, tmpfs), (volume name, target), or None when it cannot be
    honoured (said in notes). A bind of a host path that is unsafe to give a project raises ProfileError."""
    if isinstance(raw, str):
        fields: dict[str, str] = {}
        for part in raw.split(","):
            key, sep, value = part.strip().partition("=")
            fields[key.strip().lower()] = value.strip() if sep else "true"
    elif isinstance(raw, dict) and all(isinstance(k, str) for k in raw):
        fields = {k.lower(): str(v).lower() if isinstance(v, bool) else str(v) for k, v in raw.items()}
    else:
        notes.append(f"mounts {validate.preview(raw, 40)}: neither a mount string nor an object")
        return None
    shown = validate.preview(raw if isinstance(raw, str) else fields.get("target", "?"), 60)
    kind = fields.pop("type", "volume")
    src = fields.pop("source", None) or fields.pop("src", None) or ""
    target = fields.pop("target", None) or fields.pop("destination", None) or fields.pop("dst", None) or ""
    readonly = False
    for key in ("readonly", "ro"):
        if key in fields:
            readonly = fields.pop(key) in ("true", "1", "")
    fields.pop("consistency", None)   # macOS file sharing only
    for key in sorted(fields):
        notes.append(f"mounts {shown}: option {key} not honoured (the mount is made without it)")
    problem = validate.container_path_problem(target) if target else "has no target"
    if problem:
        raise ProfileError(f"{source}: mount {shown}: target {problem}", "give target=/absolute/path/in/container")
    if target.rstrip("/") == "" or any(target == t or target.startswith(t + "/") for t in _DEVENV_TARGETS):
        raise ProfileError(f"{source}: mount {shown}: target {target} would replace devenv's own files "
                           "(sshd, Jupyter, the venv) or the system's", "mount it somewhere else, e.g. /data")
    if "${" in src:
        notes.append(f"mounts {shown}: a source with ${{...}} (a path on this machine) cannot be mounted on the "
                     "GPU host; not mounted (use `devenv sync` for the project's files)")
        return None
    if kind == "tmpfs":
        return MountSpec("tmpfs", target)
    if kind == "volume":
        if not re.fullmatch(_VOLUME_NAME, src or "") or src == "workspace":
            notes.append(f"mounts {shown}: volume name {validate.preview(src)} is not a plain name; not mounted")
            return None
        if readonly:
            notes.append(f"mounts {shown}: readonly not honoured for volumes")
        return src, target
    if kind != "bind":
        notes.append(f"mounts {shown}: type {validate.preview(kind)} is not supported (bind, volume, tmpfs)")
        return None
    unsafe = bind_source_problem(src)
    if unsafe:
        raise ProfileError(f"{source}: mount {shown}: refused: the host path {unsafe}",
                           "bind a data folder of the GPU host (e.g. /data/datasets or /home/you/data), or remove "
                           "the mount; the project's own files go in with `devenv sync`")
    return MountSpec("bind", target, src, readonly)


def bind_source_problem(path: str) -> str | None:
    """Why a host path may not be bound into a project's container, or None. Checked on the text here and on
    the host's realpath before the container is made (a link must not lead around it)."""
    problem = validate.container_path_problem(path) if path else "is missing"
    if problem:
        return problem.replace("inside the container", "on the host")
    norm = "/" + "/".join(p for p in path.split("/") if p not in ("", "."))
    if norm in _NOT_WHOLE:
        return f"{norm} is a whole system folder (bind a folder inside it)"
    for tree in _SYSTEM_TREES:
        if norm == tree or norm.startswith(tree + "/"):
            return f"{norm} is under {tree} (the host's system, homes of root or the engine's state)"
    parts = norm.split("/")
    if len(parts) == 3 and parts[1] == "home":
        return f"{norm} is a whole home folder (its .ssh and shell files would be writable from the project)"
    if _CREDENTIALS & set(parts):
        return f"{norm} holds credentials ({', '.join(sorted(_CREDENTIALS & set(parts)))})"
    if norm.endswith(".sock") or parts[-1] in ("docker.sock", "podman.sock", "containerd.sock"):
        return f"{norm} is a socket (an engine's socket is root on the host)"
    return None


def _inside(base: str, relative: str, source: str) -> str:
    """base/relative, normalised, refused when it leaves the project root (the build context stays confined)."""
    parts: list[str] = []
    for part in (PurePosixPath(base) / relative).parts:
        if part == "..":
            if not parts:
                raise ProfileError(f"{source}: {validate.preview(relative, 40)} leaves the project folder",
                                   "keep the Dockerfile and build context inside the project")
            parts.pop()
        elif part not in (".", ""):
            parts.append(part)
    if PurePosixPath(relative).is_absolute():
        raise ProfileError(f"{source}: {validate.preview(relative, 40)} is an absolute path",
                           "give it relative to devcontainer.json")
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
    if not isinstance(value, str) or not value or validate.text_problem(value):  # no control characters either
        raise ProfileError(f"{source}: {key} must be a one-line string", f"fix {key}")
    return value


def _opt_str(data: dict[str, Any], key: str, source: str) -> str | None:
    return _str(data[key], key, source) if key in data else None


def _str_map(value: Any, key: str, source: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ProfileError(f"{source}: {key} must be an object of strings", f"fix {key}")
    out = {}
    for k, v in value.items():
        if (not isinstance(k, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", k)
                or not isinstance(v, (str, int, float, bool)) or "\0" in str(v)):
            shown = k if isinstance(k, str) and re.fullmatch(r"[A-Za-z0-9_]{1,20}", k) else validate.preview(k)
            raise ProfileError(f"{source}: {key}.{shown} is not a NAME: value pair",
                               f"fix {key} (names are letters, digits and _; values hold no NUL)")
        out[k] = str(v).lower() if isinstance(v, bool) else str(v)
    return out


def overlay(env: EnvProfile, dc: Devcontainer, project_root: str = "", context_digest: str = ""
            ) -> tuple[EnvProfile, list[str]]:
    """env with the devcontainer laid under devenv's needs: its image (or the image its Dockerfile builds, from
    the project folder) as the base devenv's image is built FROM (Jupyter, sshd, the ready probe, the user
    come from devenv's Dockerfile), its environment variables, mounts and user; and the notes on what is not
    honoured (to print). context_digest: project_context.digest of the build context (a change rebuilds)."""
    import hashlib

    notes = list(dc.not_honoured)
    workspace = env.volumes.get("workspace")
    if dc.workspace_folder not in (None, workspace):
        notes.append(f"workspaceFolder {dc.workspace_folder}: the workspace is {workspace}")
    for mount in dc.mounts:
        if workspace and mount.target.rstrip("/") == workspace.rstrip("/"):
            raise ProfileError(f"{dc.source}: a mount's target is the workspace {workspace}",
                               "the workspace is devenv's volume (filled with `devenv sync`); mount elsewhere")
    for name, target in dc.volumes.items():
        if target in env.volumes.values():
            raise ProfileError(f"{dc.source}: volume {name}'s target {target} is already one of devenv's volumes",
                               "mount it somewhere else")
    slug = "".join(c if c.isalnum() or c in "-_." else "-" for c in (dc.name or env.name).lower()).strip("-.")
    slug = slug or "project"
    project_build = None
    base = dc.image
    if dc.dockerfile is not None:
        if not context_digest:
            raise ProfileError(f"{dc.source}: internal: the build context was not read", "report this bug")
        base_digest = hashlib.sha256(repr((context_digest, dc.dockerfile, dc.context, sorted(dc.build_args.items()),
                                           dc.target)).encode()).hexdigest()[:12]
        base = f"devenv-dc-base/{slug}:{base_digest}"
        project_build = ProjectBuild(context_dir=dc.context, dockerfile=dc.dockerfile, tag=base,
                                     args=dict(dc.build_args), target=dc.target, project_root=project_root)
    elif dc.build_args:
        notes.append("build.args: used only with build.dockerfile")
    dockerfile = env.build.dockerfile if env.build else "pytorch.Dockerfile"
    args = {**(env.build.args if env.build else {}), "BASE_IMAGE": base or ""}
    user = dc.remote_user or env.user
    digest = hashlib.sha256(repr((env.image, dockerfile, sorted(args.items()), env.pip, env.apt, user))
                            .encode()).hexdigest()[:12]
    volumes = {**env.volumes, **{f"dc-{name}": target for name, target in dc.volumes.items()}}
    return replace(env, image=f"devenv-dc/{slug}:{digest}", build=BuildSpec(dockerfile, args),
                   env={**env.env, **dc.env}, user=user, mounts=(*env.mounts, *dc.mounts), volumes=volumes,
                   project_build=project_build), notes
