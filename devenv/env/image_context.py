"""The build context for an environment's image (L0): bundled Dockerfile and scripts, plus optional inputs.

The context is made on the laptop and streamed to the host's daemon, so a CA bundle or a wheelhouse on the
laptop reaches hosts behind TLS-inspecting proxies or without internet:
  extra-ca.crt   appended to the image's trust store (pip, apt and the user's own tools in the environment)
  wheels/        a wheelhouse for pip (--find-links); with offline, pip uses nothing else
Defaults come from $DEVENV_BUILD_CA_BUNDLE and $DEVENV_WHEELHOUSE (flags win), as for every setting.
"""

from __future__ import annotations

import os
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from devenv.config import paths
from devenv.config.profiles import EnvProfile
from devenv.errors import DevenvError, ProfileError

WHEEL_SUFFIXES = (".whl", ".tar.gz", ".zip")
# Bundled files that never go into a context (docs, editor droppings).
_SKIP = {"README.md", ".keep"}


@dataclass(frozen=True)
class BuildInputs:
    ca_bundle: Path | None = None
    wheelhouse: Path | None = None
    offline: bool = False

    @classmethod
    def from_options(cls, ca_bundle: str | None, wheelhouse: str | None, offline: bool = False) -> BuildInputs:
        """Flags win over $DEVENV_BUILD_CA_BUNDLE / $DEVENV_WHEELHOUSE."""
        ca = ca_bundle or os.environ.get("DEVENV_BUILD_CA_BUNDLE") or None
        wheels = wheelhouse or os.environ.get("DEVENV_WHEELHOUSE") or None
        inputs = cls(Path(ca).expanduser() if ca else None, Path(wheels).expanduser() if wheels else None, offline)
        inputs.validate()
        return inputs

    def validate(self) -> None:
        if self.ca_bundle is not None:
            if not self.ca_bundle.is_file():
                raise DevenvError(f"CA bundle {self.ca_bundle} does not exist",
                                  "give a PEM file (e.g. /etc/ssl/certs/ca-certificates.crt) to --ca-bundle")
            if b"BEGIN CERTIFICATE" not in self.ca_bundle.read_bytes()[:1_000_000]:
                raise DevenvError(f"{self.ca_bundle} holds no PEM certificate",
                                  "the CA bundle must be PEM text with -----BEGIN CERTIFICATE----- blocks")
        if self.wheelhouse is not None and not self.wheelhouse.is_dir():
            raise DevenvError(f"wheelhouse {self.wheelhouse} is not a directory",
                              "give a folder of wheels (pip download -d DIR ...) to --wheelhouse")
        if self.offline and not self.wheels():
            raise DevenvError("--offline needs a wheelhouse with every package the image installs",
                              "pip download -d DIR jupyterlab ipykernel torch==... on a machine with internet, "
                              "then pass --wheelhouse DIR")

    def wheels(self) -> list[Path]:
        if self.wheelhouse is None:
            return []
        return sorted(p for p in self.wheelhouse.iterdir() if p.is_file() and p.name.endswith(WHEEL_SUFFIXES))


def dockerfile_path(env: EnvProfile) -> Path:
    if env.build is None:
        raise ProfileError(f"environment '{env.name}' has no build section: its image {env.image} can only be pulled",
                           "add build: {dockerfile: pytorch.Dockerfile, args: {...}} to the profile to build it")
    path = paths.bundled_dir("images") / env.build.dockerfile
    if not path.is_file():
        raise ProfileError(f"{env.source}: build.dockerfile '{env.build.dockerfile}' is not in {path.parent}",
                           "name a Dockerfile under images/ (e.g. pytorch.Dockerfile)")
    return path


def build_args(env: EnvProfile, inputs: BuildInputs) -> dict[str, str]:
    """The profile's args plus what the labels declare (the build verifies torch against it)."""
    args = dict(env.build.args if env.build else {})
    args["DEVENV_CUDA"] = env.cuda or ""
    args["DEVENV_TORCH"] = env.torch or ""
    args["OFFLINE"] = "1" if inputs.offline else "0"
    return args


def make_context(env: EnvProfile, inputs: BuildInputs) -> tuple[tempfile.SpooledTemporaryFile, str, int]:
    """(tar file object positioned at 0, the Dockerfile's name inside it, its size in bytes)."""
    dockerfile = dockerfile_path(env)
    out = tempfile.SpooledTemporaryFile(max_size=32 * 1024 * 1024)  # noqa: SIM115 (handed to the caller)
    with tarfile.open(fileobj=out, mode="w") as tar:
        for path in sorted(dockerfile.parent.iterdir()):
            if path.is_file() and path.name not in _SKIP and not path.name.startswith("."):
                _add(tar, path, path.name)
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
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}

