"""The compatibility tables (devenv/compat/data/*.yaml) as typed, read-only rows. Loaded once, validated on load."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

from devenv.compat.versions import (
    CompatInputError,
    ComputeCapability,
    CudaVersion,
    DriverVersion,
    parse_cc,
    parse_cuda,
    parse_driver,
)

# The bundled tables (ours, plain YAML) through libyaml's safe loader where PyYAML has it: ~8x less CPU than the
# pure-Python SafeLoader, the same data (tests/test_profiles.py compares the two on every bundled table).
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class DriverFloor:
    """Minor-version compatibility: the lowest driver that runs any release of a toolkit major."""

    cuda_major: int
    driver: DriverVersion
    source: str


@dataclass(frozen=True)
class ToolkitRelease:
    """A toolkit release and the driver it ships with (at or above it, the release runs in full)."""

    cuda: CudaVersion
    driver: DriverVersion
    source: str
    secondary: bool = False
    note: str = ""


@dataclass(frozen=True)
class DroppedArchs:
    """Compute capabilities a toolkit (from `from_cuda` on) no longer compiles for."""

    from_cuda: CudaVersion
    patterns: tuple[str, ...]  # "5.*" or "7.0"
    names: str
    source: str

    def covers(self, cc: ComputeCapability) -> bool:
        return any(p == f"{cc.major}.*" or p == str(cc) for p in self.patterns)


@dataclass(frozen=True)
class TorchWheel:
    """One official PyTorch wheel family: tag, torch major.minor range (inclusive) and its architectures."""

    tag: str
    torch_min: tuple[int, int]
    torch_max: tuple[int, int]
    sass: tuple[ComputeCapability, ...]
    ptx: tuple[ComputeCapability, ...]
    ptx_known: bool
    arch_list: str  # as in the source, e.g. "7.5;8.0;8.6;9.0;10.0;12.0+PTX"
    source: str
    exact_sass: frozenset[ComputeCapability] = frozenset()  # sm_90a-style SASS: runs only on exactly that CC

    def covers(self, version: tuple[int, int]) -> bool:
        return self.torch_min <= version <= self.torch_max

    @property
    def torch_range(self) -> str:
        low, high = (f"{v[0]}.{v[1]}" for v in (self.torch_min, self.torch_max))
        return low if low == high else f"{low}-{high}"

    @property
    def torch_arch_names(self) -> list[str]:
        """The list as torch.cuda.get_arch_list() prints it: sm_XY for SASS, compute_XY for PTX."""
        return ([cc.sm + ("a" if cc in self.exact_sass else "") for cc in self.sass]
                + [f"compute_{cc.major}{cc.minor}" for cc in self.ptx])


def wheel_from_arch_list(names: list[str], tag: str = "measured") -> TorchWheel:
    """A build described by torch.cuda.get_arch_list() as read on the host (e.g. ['sm_90', 'compute_90'])."""
    sass, ptx, exact = [], [], set()
    for name in names:
        kind, _, code = name.strip().lower().partition("_")
        try:
            cc = parse_cc(f"sm_{code}")
        except CompatInputError:
            cc = None
        if cc is None or kind not in ("sm", "compute"):
            raise CompatInputError(f"not an architecture name: {name!r}",
                                   "give torch.cuda.get_arch_list() entries, e.g. sm_90 compute_90")
        if kind == "compute":
            ptx.append(cc)
        elif kind == "sm":
            sass.append(cc)
            if code.endswith("a"):  # arch-specific SASS (sm_90a) is not compatible even within its major
                exact.add(cc)
    return TorchWheel(tag=tag, torch_min=(0, 0), torch_max=(0, 0), sass=tuple(sass), ptx=tuple(ptx),
                      ptx_known=True, arch_list=" ".join(names),
                      source="torch.cuda.get_arch_list() read on the host", exact_sass=frozenset(exact))


@dataclass(frozen=True)
class GpuModel:
    name: str
    pattern: re.Pattern[str]
    cc: ComputeCapability
    segment: str  # datacenter | workstation | consumer
    forward_compat: str  # yes | maybe | no
    examples: tuple[str, ...]
    source: str


@dataclass(frozen=True)
class Tables:
    floors: dict[int, DriverFloor]
    releases: dict[str, ToolkitRelease]  # keyed by "12.8"
    minor_version_limits: tuple[str, ...]
    dropped: tuple[DroppedArchs, ...]
    forward_compat_package: str  # "cuda-compat-{major}-{minor}"
    forward_compat_error: str
    forward_compat_source: str
    wheels: tuple[TorchWheel, ...]
    gpus: tuple[GpuModel, ...]
    integrated_ccs: frozenset[ComputeCapability]
    integrated_source: str

    def release(self, cuda: CudaVersion) -> ToolkitRelease | None:
        return self.releases.get(cuda.release) if cuda.minor is not None else None

    def wheels_for(self, tag: str) -> list[TorchWheel]:
        return [w for w in self.wheels if w.tag == tag]

    def find_gpu(self, name: str) -> GpuModel | None:
        """The model whose pattern matches an nvidia-smi name (e.g. "NVIDIA H200"); None when none does."""
        for gpu in self.gpus:
            if gpu.pattern.search(name):
                return gpu
        return None


def _load(name: str) -> dict[str, Any]:
    text = resources.files("devenv.compat").joinpath("data").joinpath(name).read_text(encoding="utf-8")
    data: dict[str, Any] = yaml.load(text, Loader=_LOADER)
    return data


def _torch_mm(text: str) -> tuple[int, int]:
    major, minor = str(text).split(".")
    return int(major), int(minor)


def _arch_list(text: str) -> tuple[tuple[ComputeCapability, ...], tuple[ComputeCapability, ...]]:
    sass, ptx = [], []
    for entry in text.split(";"):
        base, plus, _ = entry.strip().partition("+PTX")
        cc = parse_cc(base)
        sass.append(cc)
        if plus:
            ptx.append(cc)
    return tuple(sass), tuple(ptx)


def _require_source(row: dict[str, Any], where: str) -> str:
    source = row.get("source")
    if not source:
        raise ValueError(f"compat data row without a source in {where}: {row}")
    return str(source)


@functools.lru_cache(maxsize=1)
def load_tables() -> Tables:
    toolkit = _load("toolkit.yaml")
    wheels_doc = _load("torch_wheels.yaml")
    gpus_doc = _load("gpus.yaml")

    floors = {}
    for row in toolkit["minimum_driver"]:
        major = int(row["cuda"])
        floors[major] = DriverFloor(major, parse_driver(str(row["driver"])), _require_source(row, "toolkit"))
    releases = {}
    for row in toolkit["releases"]:
        cuda = parse_cuda(str(row["cuda"]))
        releases[cuda.release] = ToolkitRelease(
            cuda, parse_driver(str(row["driver"])), _require_source(row, "toolkit"),
            bool(row.get("secondary", False)), str(row.get("note", "")),
        )
    dropped = tuple(
        DroppedArchs(parse_cuda(str(row["from_cuda"])), tuple(row["compute_capabilities"]), row["names"],
                     _require_source(row, "toolkit"))
        for row in toolkit["dropped_architectures"]
    )
    forward = toolkit["forward_compatibility"]

    wheels = []
    for row in wheels_doc["wheels"]:
        sass, ptx = _arch_list(row["arch_list"])
        low, high = row["torch"]
        wheels.append(TorchWheel(
            tag=row["tag"], torch_min=_torch_mm(low), torch_max=_torch_mm(high), sass=sass, ptx=ptx,
            ptx_known=bool(row.get("ptx_known", True)), arch_list=row["arch_list"],
            source=_require_source(row, "torch_wheels"),
        ))

    gpus = tuple(
        GpuModel(
            name=row["name"], pattern=re.compile(row["match"], re.IGNORECASE), cc=parse_cc(row["cc"]),
            segment=row["segment"], forward_compat=row["forward_compat"], examples=tuple(row.get("examples", ())),
            source=_require_source(row, "gpus"),
        )
        for row in gpus_doc["gpus"]
    )
    integrated = gpus_doc["integrated_compute_capabilities"]

    return Tables(
        floors=floors, releases=releases, minor_version_limits=tuple(toolkit["minor_version_limits"]),
        dropped=dropped, forward_compat_package=forward["package"], forward_compat_error=forward["error"],
        forward_compat_source=_require_source(forward, "toolkit"), wheels=tuple(wheels), gpus=gpus,
        integrated_ccs=frozenset(parse_cc(v) for v in integrated["values"]),
        integrated_source=_require_source(integrated, "gpus"),
    )
