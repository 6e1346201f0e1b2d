"""The build context for an environment's image (L0): bundled Dockerfile and scripts, plus optional inputs.

The context is made on the laptop and streamed to the host's daemon, so a CA bundle or a wheelhouse on the
laptop reaches hosts behind TLS-inspecting proxies or without internet:
  extra-ca.crt   appended to the image's trust store (pip, apt and the user's own tools in the environment)
  wheels/        a wheelhouse for pip (--find-links); with offline, pip uses nothing else
Defaults come from $DEVENV_BUILD_CA_BUNDLE and $DEVENV_WHEELHOUSE (flags win), as for every setting.

The context is the files of one folder: the bundled images/, or a folder the user names for that purpose with
$DEVENV_BUILD_CONTEXT (said in the build's output). A profile's build.dockerfile names a file in one of them,
never a path elsewhere (`../../x/Dockerfile` or `/home/me/Dockerfile` would send that folder's files, an
ssh key among them, to the remote daemon). Links that leave the folder are not followed.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shlex
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from devenv.config import paths, validate
from devenv.config.profiles import EnvProfile
from devenv.errors import BadInput, ProfileError

WHEEL_SUFFIXES = (".whl", ".tar.gz", ".zip")
# Bundled files that never go into a context (docs, editor droppings).
_SKIP = {"README.md", ".keep"}


@dataclass(frozen=True)
class BuildInputs:
    ca_bundle: Path | None = None
    wheelhouse: Path | None = None
    offline: bool = False
    context_dir: Path | None = None   # a build-context folder the user named ($DEVENV_BUILD_CONTEXT)

    @classmethod
    def from_options(cls, ca_bundle: str | None, wheelhouse: str | None, offline: bool = False,
                     context_dir: str | None = None) -> BuildInputs:
        """Flags win over $DEVENV_BUILD_CA_BUNDLE / $DEVENV_WHEELHOUSE / $DEVENV_BUILD_CONTEXT."""
        ca = ca_bundle or os.environ.get("DEVENV_BUILD_CA_BUNDLE") or None
        wheels = wheelhouse or os.environ.get("DEVENV_WHEELHOUSE") or None
        context = context_dir or os.environ.get("DEVENV_BUILD_CONTEXT") or None
        for what, value in (("--ca-bundle", ca), ("--wheelhouse", wheels), ("DEVENV_BUILD_CONTEXT", context)):
            problem = validate.local_path_problem(value) if value else None
            if problem:
                raise BadInput(f"{what} {validate.preview(value)} {problem}", "give a plain path")
        inputs = cls(Path(ca).expanduser() if ca else None, Path(wheels).expanduser() if wheels else None, offline,
                     Path(context).expanduser() if context else None)
        inputs.validate()
        return inputs

    def validate(self) -> None:
        if self.context_dir is not None and not self.context_dir.is_dir():
            raise BadInput(f"build context {self.context_dir} is not a directory",
                           "DEVENV_BUILD_CONTEXT names the folder holding your Dockerfile and the files it copies")
        if self.ca_bundle is not None:
            if not self.ca_bundle.is_file():
                raise BadInput(f"CA bundle {self.ca_bundle} does not exist",
                                  "give a PEM file (e.g. /etc/ssl/certs/ca-certificates.crt) to --ca-bundle")
            if b"BEGIN CERTIFICATE" not in _head(self.ca_bundle, 1_000_000):
                raise BadInput(f"{self.ca_bundle} holds no PEM certificate",
                                  "the CA bundle must be PEM text with -----BEGIN CERTIFICATE----- blocks")
        if self.wheelhouse is not None and not self.wheelhouse.is_dir():
            raise BadInput(f"wheelhouse {self.wheelhouse} is not a directory",
                              "give a folder of wheels (pip download -d DIR ...) to --wheelhouse")
        if self.offline and not self.wheels():
            raise BadInput("--offline needs a wheelhouse with every package the image installs",
                              "pip download -d DIR jupyterlab ipykernel torch==... on a machine with internet, "
                              "then pass --wheelhouse DIR")

    def wheels(self) -> list[Path]:
        if self.wheelhouse is None:
            return []
        return sorted(p for p in self.wheelhouse.iterdir() if p.is_file() and p.name.endswith(WHEEL_SUFFIXES))


def _head(path: Path, size: int) -> bytes:
    with open(path, "rb") as f:
        return f.read(size)


def dockerfile_path(env: EnvProfile, inputs: BuildInputs | None = None) -> Path:
    """The Dockerfile, inside images/ or inside the build-context folder the user named; nowhere else."""
    if env.build is None:
        raise ProfileError(f"environment '{env.name}' has no build section: its image {env.image} can only be pulled",
                           "add build: {dockerfile: pytorch.Dockerfile, args: {...}} to the profile to build it")
    named = env.build.dockerfile
    bundled = paths.bundled_dir("images")
    user_root = inputs.context_dir if inputs is not None else None
    roots = [r.resolve() for r in (bundled, user_root) if r is not None]
    given = Path(named).expanduser()
    candidates = [given] if given.is_absolute() else [root / given for root in roots]
    for candidate in candidates:
        real = candidate.resolve()
        if real.parent in roots and ".." not in given.parts and real.is_file():
            return real
    where = f"{bundled} or {user_root}" if user_root else str(bundled)
    raise ProfileError(f"{env.source}: build.dockerfile {validate.preview(named, 40)} is not in {where}",
                       "name a Dockerfile under images/ (e.g. pytorch.Dockerfile); for your own, put it in a "
                       "folder of its own and set DEVENV_BUILD_CONTEXT=that folder (only its files are sent)")


def context_root(env: EnvProfile, inputs: BuildInputs) -> Path:
    """The folder whose files make the context (what the build's output names)."""
    return dockerfile_path(env, inputs).parent


def build_args(env: EnvProfile, inputs: BuildInputs) -> dict[str, str]:
    """The profile's args plus what the labels declare (the build verifies torch against it), the user and
    the pip/apt lists (validated as package specs at the profile's boundary; the scripts split them into
    arguments with globbing off, never through a shell line)."""
    args = dict(env.build.args if env.build else {})
    args["DEVENV_CUDA"] = env.cuda or ""
    args["DEVENV_TORCH"] = env.torch or ""
    args["OFFLINE"] = "1" if inputs.offline else "0"
    if env.user:
        args["DEVENV_USER"] = env.user
    if env.pip:
        args["DEVENV_PIP"] = " ".join(env.pip)
    if env.apt:
        args["DEVENV_APT"] = " ".join(env.apt)
    return args


CONTENT_LABEL = "org.devenv.content"


def content_hash(env: EnvProfile) -> str:
    """What the profile bakes into the image beyond its tag (pip, apt, user): the image carries it in a label,
    and an image whose label differs is rebuilt. Empty when the profile adds none (images made before keep
    matching)."""
    extra = {k: v for k, v in (("pip", list(env.pip)), ("apt", list(env.apt)), ("user", env.user)) if v}
    if not extra:
        return ""
    return hashlib.sha256(json.dumps(extra, sort_keys=True).encode()).hexdigest()[:16]


def make_context(env: EnvProfile, inputs: BuildInputs) -> tuple[tempfile.SpooledTemporaryFile[bytes], str, int]:
    """(tar file object positioned at 0, the Dockerfile's name inside it, its size in bytes)."""
    dockerfile = dockerfile_path(env, inputs)
    root = dockerfile.parent
    out = tempfile.SpooledTemporaryFile(max_size=32 * 1024 * 1024)  # noqa: SIM115 (handed to the caller)
    with tarfile.open(fileobj=out, mode="w") as tar:
        for path in sorted(root.iterdir()):
            # a link is followed only while it stays in the folder: nothing outside it travels
            if (path.is_file() and path.name not in _SKIP and not path.name.startswith(".")
                    and path.resolve().parent == root):
                _add(tar, path.resolve(), path.name)
        if inputs.ca_bundle is not None:
            _add(tar, inputs.ca_bundle, "extra-ca.crt")
        for wheel in inputs.wheels():
            _add(tar, wheel, f"wheels/{wheel.name}")
    size = out.tell()
    out.seek(0)
    return out, dockerfile.name, size


def _add(tar: tarfile.TarFile, path: Path, name: str, digest: hashlib._Hash | None = None) -> None:
    """Add with a fixed owner and mode: the image must not depend on who built it, or on their umask. digest, if
    given, is fed the bytes as they go in."""
    info = tar.gettarinfo(str(path), arcname=name)
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mode = 0o755 if os.access(path, os.X_OK) else 0o644
    with open(path, "rb") as f:
        tar.addfile(info, f if digest is None else _Digesting(f, digest))


class _Digesting:
    """A file whose reads also feed a hash."""

    def __init__(self, file: IO[bytes], digest: hashlib._Hash):
        self._file, self._digest = file, digest

    def read(self, size: int = -1) -> bytes:
        data = self._file.read(size)
        self._digest.update(data)
        return data


def context_bytes_for_test(env: EnvProfile, inputs: BuildInputs) -> dict[str, bytes]:
    """The context's files by name (tests inspect what would be sent)."""
    fileobj, _, _ = make_context(env, inputs)
    with tarfile.open(fileobj=fileobj) as tar:
        files = {m.name: tar.extractfile(m) for m in tar.getmembers() if m.isfile()}
        return {name: f.read() for name, f in files.items() if f is not None}  # a file member always has one


# --- the venv made in a container of the runtime stage, then committed (Docker only; see DockerRuntime) ------

RUNTIME_STAGE = "runtime"                    # the bundled Dockerfile's stage holding everything but the venv
VENV_STAGE = "builder"                       # the stage whose RUNs make /opt/venv (a plain build's way)
BUILD_CACHE_LABEL = "org.devenv.build-cache"  # on a committed image: the fingerprint of what made its venv
BUILD_DIR = "/tmp/devenv-build"               # the scripts and the wheelhouse, as the builder stage has them
_ARGS_FILE = "/tmp/devenv-build-args"         # the build arguments, KEY='value' lines (never the container's env)
_DRIVER = "/tmp/devenv-build-run.sh"
_VENV_SCRIPTS = ("install-python.sh", "install-extra.sh")
_ARG_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_ARG_LINE = re.compile(r"ARG\s+([A-Za-z_][A-Za-z0-9_]*)(?:=(\S*))?\s*\Z")
# A default as the bundled Dockerfile writes one: plain text and ${NAME} of an earlier ARG, which a shell
# expands as the classic builder does; nothing a shell would read otherwise.
_ARG_DEFAULT = re.compile(r"(?:[A-Za-z0-9_.:/+@%,=-]|\$\{[A-Za-z_][A-Za-z0-9_]*\})*\Z")
# The builder stage's two RUNs and the final stage's COPY --chown, in one container; then the build's files go,
# so they are in no layer of the committed image.
_DRIVER_TEXT = f"""set -eu
set -a
. {_ARGS_FILE}
set +a
DEVENV_BUILD_KEEP=1 sh {BUILD_DIR}/install-python.sh
sh {BUILD_DIR}/install-extra.sh pip
u=${{DEVENV_USER:-root}}
if [ "$u" != root ] && [ "$u" != 0 ]; then
    g=$(id -u "$u")
    getent group "$u" >/dev/null 2>&1 && g=$u
    chown -hR "$u:$g" /opt/venv
fi
rm -rf {BUILD_DIR} {_ARGS_FILE} {_DRIVER}
"""


@dataclass
class CommitBuild:
    """What `up` puts into a container of the runtime stage to make the venv there: a tar for /tmp (scripts,
    wheelhouse, build arguments, the driver), the command, and a fingerprint of all of it (with the runtime
    image's id: the build cache's key)."""

    archive: tempfile.SpooledTemporaryFile[bytes]
    command: list[str]
    parts: str   # what the fingerprint covers, as text (each file by its content's sha256)

    def fingerprint(self, runtime_image_id: str, labels: dict[str, str]) -> str:
        text = json.dumps({"runtime": runtime_image_id, "parts": self.parts, "labels": labels}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def close(self) -> None:
        self.archive.close()


def is_bundled(env: EnvProfile, inputs: BuildInputs) -> bool:
    """env builds images/pytorch.Dockerfile as devenv ships it (the one with a runtime stage)."""
    return inputs.context_dir is None and dockerfile_path(env, inputs) == paths.bundled_dir("images").resolve() / \
        "pytorch.Dockerfile"


def stage_args(dockerfile_text: str, stage: str) -> dict[str, str | None]:
    """The ARGs a stage of a Dockerfile declares, in order: name -> its default (None: none)."""
    declared: dict[str, str | None] = {}
    inside = False
    for raw in dockerfile_text.splitlines():
        line = raw.strip()
        if line.upper().startswith("FROM "):
            inside = line.split()[-1] == stage and line.split()[-2].upper() == "AS"
        elif inside and (found := _ARG_LINE.match(line)):
            declared[found.group(1)] = found.group(2)
    return declared


def args_file(args: dict[str, str], defaults: dict[str, str | None] | None = None) -> bytes:
    """The build arguments as lines a POSIX shell sources: KEY='value', each value shell-quoted; then, for each
    of defaults (a stage's ARGs) not given, its default as the Dockerfile writes it (${NAME} of an earlier one
    expanded, as the classic builder does). A name that is not a shell identifier is refused (it could not be an
    ARG either), and so is a default holding anything but plain text and ${NAME}."""
    lines = []
    for key, value in sorted(args.items()):
        if not _ARG_NAME.match(key):
            raise BadInput(f"build argument {validate.preview(key, 40)} is not a valid name",
                           "build args are NAME: value with NAME made of letters, digits and _")
        lines.append(f"{key}={shlex.quote(value)}\n")
    for key, default in (defaults or {}).items():
        if key in args or default is None:
            continue
        if not _ARG_DEFAULT.match(default):
            raise ProfileError(f"the Dockerfile's ARG {key} has a default devenv cannot pass on: "
                               f"{validate.preview(default, 60)}", "build with DEVENV_BUILD_VENV=copy")
        lines.append(f"{key}={default}\n")
    return "".join(lines).encode()


def commit_build(env: EnvProfile, inputs: BuildInputs) -> CommitBuild:
    """The files and command that make /opt/venv in a container of the runtime stage."""
    images = paths.bundled_dir("images")
    out = tempfile.SpooledTemporaryFile(max_size=32 * 1024 * 1024)  # noqa: SIM115 (handed to the caller)
    parts = []
    with tarfile.open(fileobj=out, mode="w") as tar:
        folder = tarfile.TarInfo(BUILD_DIR.removeprefix("/tmp/"))
        folder.type, folder.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(folder)
        for name in _VENV_SCRIPTS:
            data = (images / name).read_bytes()
            _add_bytes(tar, f"{folder.name}/{name}", data, 0o755)
            parts.append(f"{name} {hashlib.sha256(data).hexdigest()}")
        for wheel in inputs.wheels():
            # by content, hashed as it is read into the tar: a wheel rebuilt under the same name and size is
            # another wheel (the read is paid anyway; sha256 adds ~0.16 s CPU for torch's 192 MB wheel)
            digest = hashlib.sha256()
            _add(tar, wheel, f"{folder.name}/{wheel.name}", digest)
            parts.append(f"wheel {wheel.name} {digest.hexdigest()}")
        # the builder stage's ARGs only (what its RUNs see), with their defaults; and the user, for the chown
        declared = stage_args((images / "pytorch.Dockerfile").read_text(), VENV_STAGE)
        given = {k: v for k, v in build_args(env, inputs).items() if k in declared or k == "DEVENV_USER"}
        for path, data in ((_ARGS_FILE, args_file(given, declared)), (_DRIVER, _DRIVER_TEXT.encode())):
            _add_bytes(tar, path.removeprefix("/tmp/"), data, 0o644)
            parts.append(f"{path} {hashlib.sha256(data).hexdigest()}")
    out.seek(0)
    return CommitBuild(out, ["/bin/sh", _DRIVER], "\n".join(parts))


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    tar.addfile(info, io.BytesIO(data))
