"""Parsing and ordering of the versions compat compares: drivers, CUDA releases, compute capabilities, torch builds.

Pure (stdlib only). Bad input raises CompatInputError (a DevenvError with a hint), never a bare ValueError.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from devenv.errors import DevenvError


class CompatInputError(DevenvError):
    """A version string compat cannot read (a typo, or a value of the wrong kind)."""

    exit_code = 2


# nvidia-smi prints these where a value is not available; callers may hand them straight in.
_NA_MARKERS = {"", "n/a", "na", "none", "unknown"}


def is_not_available(text: str | None) -> bool:
    """True for None and nvidia-smi's "[N/A]", "[Not Supported]", ... placeholders."""
    if text is None:
        return True
    stripped = text.strip()
    return stripped.lower() in _NA_MARKERS or (stripped.startswith("[") and stripped.endswith("]"))


@functools.total_ordering
@dataclass(frozen=True)
class DriverVersion:
    """A Linux driver version such as 580.159.04 or 570.26 (numeric parts; text kept for display)."""

    parts: tuple[int, ...]
    text: str

    def _key(self) -> tuple[int, int, int]:
        padded = self.parts + (0,) * (3 - len(self.parts))
        return padded[:3]  # type: ignore[return-value]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DriverVersion) and self._key() == other._key()

    def __lt__(self, other: DriverVersion) -> bool:
        return self._key() < other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __str__(self) -> str:
        return self.text

    @property
    def branch(self) -> int:
        return self.parts[0]


_DRIVER_RE = re.compile(r"^\d{1,4}(\.\d{1,3}){0,2}$", re.ASCII)  # \d alone takes "٥٣٥" too


def parse_driver(text: str) -> DriverVersion:
    value = text.strip()
    if not _DRIVER_RE.match(value):
        raise CompatInputError(
            f"not a driver version: {text!r}",
            "give the 'Driver Version' nvidia-smi prints, e.g. 580.159.04",
        )
    parts = tuple(int(p) for p in value.split("."))
    # Every driver that runs CUDA 11+ is branch 450 or newer; a small number is almost always a CUDA version.
    if parts[0] < 100:
        raise CompatInputError(
            f"{text!r} looks like a CUDA version, not a driver version",
            "the driver version is nvidia-smi's 'Driver Version' (e.g. 580.159.04); the CUDA version goes to --cuda",
        )
    return DriverVersion(parts, value)


@functools.total_ordering
@dataclass(frozen=True)
class CudaVersion:
    """A CUDA toolkit version: major, minor (None when only the major was given), patch ignored for tables."""

    major: int
    minor: int | None = None
    patch: int | None = None

    def _key(self) -> tuple[int, int, int]:
        return (self.major, self.minor or 0, self.patch or 0)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CudaVersion) and self._key() == other._key()

    def __lt__(self, other: CudaVersion) -> bool:
        return self._key() < other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    @property
    def release(self) -> str:
        """The major.minor the release tables are keyed by."""
        return f"{self.major}.{self.minor}" if self.minor is not None else f"{self.major}"

    def __str__(self) -> str:
        text = self.release
        return f"{text}.{self.patch}" if self.patch is not None else text


_CUDA_RE = re.compile(r"^(?:cuda[ -]?)?(\d{1,2})(?:\.(\d{1,2}))?(?:\.(\d{1,3}))?$", re.IGNORECASE | re.ASCII)


def parse_cuda(text: str) -> CudaVersion:
    value = text.strip()
    match = _CUDA_RE.match(value)
    if not match:
        hint = "write the CUDA version as major.minor, e.g. 12.8"
        tag = re.fullmatch(r"(?:cu)?(\d)(\d)(\d)", value, re.IGNORECASE | re.ASCII)
        if tag:
            hint = f"did you mean {tag.group(1)}{tag.group(2)}.{tag.group(3)}? " + hint
        raise CompatInputError(f"not a CUDA version: {text!r}", hint)
    major, minor, patch = (int(g) if g is not None else None for g in match.groups())
    return CudaVersion(major, minor, patch)  # type: ignore[arg-type]


def cuda_from_tag(tag: str) -> CudaVersion:
    """PyTorch's wheel tag to the CUDA it bundles: cu128 -> 12.8, cu92 -> 9.2."""
    digits = tag[2:]
    if len(digits) == 3:
        return CudaVersion(int(digits[:2]), int(digits[2]))
    return CudaVersion(int(digits[0]), int(digits[1]))


@functools.total_ordering
@dataclass(frozen=True)
class ComputeCapability:
    """A GPU's compute capability, e.g. 9.0 (H100/H200) or 12.0 (RTX 5090)."""

    major: int
    minor: int

    def _key(self) -> tuple[int, int]:
        return (self.major, self.minor)

    def __lt__(self, other: ComputeCapability) -> bool:
        return self._key() < other._key()

    @property
    def sm(self) -> str:
        return f"sm_{self.major}{self.minor}"

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


_CC_RE = re.compile(r"^(\d{1,2})\.(\d)$", re.ASCII)
_SM_RE = re.compile(r"^(?:sm|compute)_?(\d{1,2})(\d)[af]?$", re.IGNORECASE | re.ASCII)


def parse_cc(text: str) -> ComputeCapability:
    value = text.strip()
    match = _CC_RE.match(value) or _SM_RE.match(value)
    if not match:
        raise CompatInputError(
            f"not a compute capability: {text!r}",
            "give it as major.minor (e.g. 9.0; nvidia-smi --query-gpu=compute_cap prints it) or as sm_90",
        )
    return ComputeCapability(int(match.group(1)), int(match.group(2)))


@dataclass(frozen=True)
class TorchBuild:
    """A PyTorch build as torch.__version__ prints it: 2.8.0+cu128, 2.11.0+cu130, 2.8.0+cpu, or a bare tag.

    variant: "cuda" (tag cuXYZ), "cpu", "rocm", "other" (a local tag devenv has no table for, e.g. NGC's
    2.8.0a0+...nv25.05) or "none" (no local tag at all: which build it is cannot be told).
    """

    text: str
    version: tuple[int, int] | None  # (major, minor); the patch does not change the arch list
    variant: str
    tag: str | None  # "cu128", "cpu", "rocm6.2", ...

    @property
    def cuda(self) -> CudaVersion | None:
        return cuda_from_tag(self.tag) if self.variant == "cuda" and self.tag else None

    @property
    def version_text(self) -> str | None:
        return f"{self.version[0]}.{self.version[1]}" if self.version else None

    def __str__(self) -> str:
        return self.text


_TORCH_VERSION_RE = re.compile(r"^(\d+)\.(\d+)(?:\.\d+)?(?:(?:a|b|rc|\.dev|\.post)\w*)*$", re.ASCII)
_CU_TAG_RE = re.compile(r"^cu\d{2,3}$", re.ASCII)


def _is_bare_tag(text: str) -> bool:
    return bool(_CU_TAG_RE.match(text)) or text == "cpu" or text.startswith("rocm")


def parse_torch(text: str) -> TorchBuild:
    value = text.strip()
    hint = "give torch.__version__ as printed, e.g. 2.8.0+cu128, or just the wheel tag, e.g. cu128"
    if "+" in value:
        public, local = value.split("+", 1)
    elif _is_bare_tag(value.lower()):
        public, local = "", value  # "cu128", "cpu": a wheel tag without a version
    else:
        public, local = value, ""
    local = local.lower()
    if not public and not _is_bare_tag(local):
        raise CompatInputError(f"not a PyTorch build: {text!r}", hint)
    version = None
    if public:
        match = _TORCH_VERSION_RE.match(public)
        if not match:
            raise CompatInputError(f"not a PyTorch version: {text!r}", hint)
        version = (int(match.group(1)), int(match.group(2)))
    if not local:
        variant, tag = "none", None
    elif _CU_TAG_RE.match(local):
        variant, tag = "cuda", local
    elif local == "cpu":
        variant, tag = "cpu", local
    elif local.startswith("rocm"):
        variant, tag = "rocm", local
    else:
        variant, tag = "other", local
    return TorchBuild(value, version, variant, tag)
