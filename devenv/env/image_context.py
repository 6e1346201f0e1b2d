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

import os
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

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
    import hashlib
    import json

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


def _add(tar: tarfile.TarFile, path: Path, name: str) -> None:
    """Add with a fixed owner and mode: the image must not depend on who built it, or on their umask."""
    info = tar.gettarinfo(str(path), arcname=name)
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mode = 0o755 if os.access(path, os.X_OK) else 0o644
    with open(path, "rb") as f:
        tar.addfile(info, f)


def context_bytes_for_test(env: EnvProfile, inputs: BuildInputs) -> dict[str, bytes]:
    """The context's files by name (tests inspect what would be sent)."""
    fileobj, _, _ = make_context(env, inputs)
    with tarfile.open(fileobj=fileobj) as tar:
        files = {m.name: tar.extractfile(m) for m in tar.getmembers() if m.isfile()}
        return {name: f.read() for name, f in files.items() if f is not None}  # a file member always has one

