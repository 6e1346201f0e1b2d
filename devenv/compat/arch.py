"""GPU compute capability vs the code a PyTorch build (or a CUDA toolkit) carries.

SASS built for X.y' runs on a GPU of compute capability X.Y when y' <= Y (same major); integrated (Tegra) CCs
only run SASS built for exactly them. Otherwise only embedded PTX of an equal or lower virtual architecture
can run, JIT-compiled by the driver (slow first start). Neither: "no kernel image is available".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from devenv.checks.report import FAIL, PASS, UNKNOWN, WARN
from devenv.compat.report import Finding
from devenv.compat.tables import Tables, TorchWheel, wheel_from_arch_list
from devenv.compat.versions import (
    ComputeCapability,
    CudaVersion,
    DriverVersion,
    TorchBuild,
    cuda_from_tag,
)

NO_KERNEL_IMAGE = "RuntimeError: CUDA error: no kernel image is available for execution on the device"
# torch/cuda/__init__.py _check_cubins (2.x): printed at CUDA init when no SASS of the GPU's major is present.
INCOMPATIBLE_WARNING = (
    "{name} with CUDA capability sm_{cap} is not compatible with the current PyTorch installation.\n"
    "The current PyTorch install supports CUDA capabilities {archs}."
)

Kind = Literal["sass", "ptx", "none", "unknown"]


@dataclass(frozen=True)
class ArchOutcome:
    kind: Kind
    code: ComputeCapability | None = None  # the SASS or PTX architecture that would run


def sass_runs(code: ComputeCapability, gpu: ComputeCapability, integrated: frozenset[ComputeCapability]) -> bool:
    if code == gpu:
        return True
    if code in integrated or gpu in integrated:
        return False
    return code.major == gpu.major and code.minor <= gpu.minor


def wheel_outcome(wheel: TorchWheel, cc: ComputeCapability, integrated: frozenset[ComputeCapability]) -> ArchOutcome:
    native = [s for s in wheel.sass
              if (s == cc if s in wheel.exact_sass else sass_runs(s, cc, integrated))]
    if native:
        return ArchOutcome("sass", max(native))
    jit = [p for p in wheel.ptx if p <= cc]
    if jit:
        return ArchOutcome("ptx", max(jit))
    # PTX, when embedded, is for one of the listed architectures: unknown only if one of them could serve.
    if not wheel.ptx_known and any(s <= cc for s in wheel.sass):
        return ArchOutcome("unknown")
    return ArchOutcome("none")


def _merge_ranges(wheels: list[TorchWheel]) -> str:
    spans: list[list[tuple[int, int]]] = []
    for w in sorted(wheels, key=lambda w: w.torch_min):
        if spans and w.torch_min == (spans[-1][1][0], spans[-1][1][1] + 1):
            spans[-1][1] = w.torch_max
        else:
            spans.append([w.torch_min, w.torch_max])
    parts = []
    for low, high in spans:
        text = f"{low[0]}.{low[1]}"
        parts.append(text if low == high else f"{text}-{high[0]}.{high[1]}")
    return ", ".join(parts)


@dataclass(frozen=True)
class BuildSuggestion:
    tag: str
    cuda: CudaVersion
    torch: str  # torch versions, e.g. "2.7-2.11" or "2.8, 2.12-2.13"

    def __str__(self) -> str:
        return f"{self.tag} (torch {self.torch})"


def builds_for(
    cc: ComputeCapability,
    tables: Tables,
    driver: DriverVersion | None = None,
    cuda_below: CudaVersion | None = None,
    limit: int = 3,
) -> list[BuildSuggestion]:
    """Official wheels with SASS for `cc`, newest torch first; those the driver cannot run at all left out
    (unless none is left). `cuda_below` keeps only builds of an older CUDA (e.g. below 13.0 for Volta)."""
    by_tag: dict[str, list[TorchWheel]] = {}
    for wheel in tables.wheels:
        if wheel_outcome(wheel, cc, tables.integrated_ccs).kind == "sass":
            by_tag.setdefault(wheel.tag, []).append(wheel)
    if cuda_below is not None:
        by_tag = {tag: ws for tag, ws in by_tag.items() if cuda_from_tag(tag) < cuda_below}
    if driver is not None:
        runnable = {tag: ws for tag, ws in by_tag.items()
                    if (floor := tables.floors.get(cuda_from_tag(tag).major)) and driver >= floor.driver}
        by_tag = runnable or by_tag
    # Newest PyTorch first: that is what a user would install today.
    ranked = sorted(by_tag.items(), key=lambda kv: (max(w.torch_max for w in kv[1]), cuda_from_tag(kv[0])),
                    reverse=True)
    return [BuildSuggestion(tag, cuda_from_tag(tag), _merge_ranges(ws)) for tag, ws in ranked[:limit]]


def _suggest(cc: ComputeCapability, tables: Tables, driver: DriverVersion | None,
             cuda_below: CudaVersion | None = None) -> tuple[str, dict[str, Any]]:
    suggestions = builds_for(cc, tables, driver, cuda_below)
    if not suggestions:
        return (f"no official PyTorch wheel in devenv's table has {cc.sm} kernels; build PyTorch with "
                f"TORCH_CUDA_ARCH_LIST={cc}"), {}
    text = f"use a PyTorch build with {cc.sm} kernels: " + ", ".join(str(s) for s in suggestions)
    oldest = min(suggestions, key=lambda s: s.cuda)
    requires = {"torch_builds": [s.tag for s in suggestions], "cuda": oldest.cuda.release}
    if driver is not None:
        floor = tables.floors.get(oldest.cuda.major)
        if floor and driver < floor.driver:
            text += f"; it needs a driver >= {floor.driver}"
            requires["min_driver"] = str(floor.driver)
    return text, requires


def check_torch_arch(
    cc: ComputeCapability | None,
    build: TorchBuild,
    tables: Tables,
    gpu_name: str | None = None,
    driver: DriverVersion | None = None,
    ptx_jit_blocked: str | None = None,
    arch_list: Sequence[str] | None = None,
) -> Finding:
    """Can this GPU run this PyTorch build's kernels?

    ptx_jit_blocked: why the driver cannot JIT this build's PTX (minor-version compatibility), if it cannot.
    arch_list: torch.cuda.get_arch_list() as read on the host; when given it is used instead of the table.
    """
    gpu = f"{gpu_name} (compute capability {cc})" if gpu_name and cc else (f"compute capability {cc}" if cc else
                                                                           gpu_name or "unknown GPU")
    title = f"GPU vs PyTorch {build}"
    value = f"{gpu}, torch {build}"

    if build.variant == "cpu":
        remedy, requires = _suggest(cc, tables, driver) if cc else (
            "install a CUDA build of PyTorch (e.g. +cu128 from download.pytorch.org/whl/cu128)", {})
        return Finding("torch-arch", FAIL, title, value,
                       "a CPU-only PyTorch build never uses the GPU (torch.cuda.is_available() is False)",
                       remedy, None, requires)
    if build.variant == "rocm":
        return Finding("torch-arch", FAIL, title, value, "a ROCm build of PyTorch runs on AMD GPUs, not NVIDIA ones",
                       "install a CUDA build of PyTorch", None, {})
    if arch_list:
        rows = [wheel_from_arch_list(list(arch_list), build.tag or "measured")]
    elif build.variant == "none":
        return Finding("torch-arch", UNKNOWN, title, value,
                       f"{build} has no local tag (+cu128, +cpu, ...), so which build it is cannot be told",
                       "give torch.__version__ in full, e.g. 2.8.0+cu128", None, {})
    elif build.variant == "other":
        return Finding("torch-arch", UNKNOWN, title, value,
                       f"+{build.tag} is not an official PyTorch wheel tag (a vendor build?); its architectures "
                       "are not in devenv's table",
                       "read torch.cuda.get_arch_list() on the host", None, {})
    else:
        rows = tables.wheels_for(build.tag or "")
        if build.version is not None:
            rows = [w for w in rows if w.covers(build.version)]
    if not rows:
        known = ", ".join(f"torch {w.torch_range}" for w in tables.wheels_for(build.tag or "")) or "none"
        return Finding("torch-arch", UNKNOWN, title, value,
                       f"devenv's table has no architecture list for {build} (known {build.tag} builds: {known})",
                       "read torch.cuda.get_arch_list() on the host", None, {})
    if cc is None:
        unlisted = f" ({gpu_name} is not in devenv's GPU table)" if gpu_name else ""
        return Finding("torch-arch", UNKNOWN, title, value, f"the GPU's compute capability is not known{unlisted}",
                       "give --gpu-cc (nvidia-smi --query-gpu=compute_cap) or a known --gpu-name", None, {})

    outcomes = [(w, wheel_outcome(w, cc, tables.integrated_ccs)) for w in rows]
    kinds = {o.kind for _, o in outcomes}
    if len(kinds) > 1:
        detail = "; ".join(f"torch {w.torch_range}: {o.kind}" for w, o in outcomes)
        return Finding("torch-arch", UNKNOWN, title, value,
                       f"whether {build.tag} runs on {cc.sm} depends on the torch version ({detail})",
                       "give the full torch version, e.g. 2.8.0+cu128", None, {})
    wheel, outcome = outcomes[0]
    code = outcome.code  # set for a sass or ptx outcome, the two that use it
    source = "; ".join(dict.fromkeys(w.source for w, _ in outcomes))
    archs = " ".join(wheel.torch_arch_names)

    if outcome.kind == "sass" and code is not None:
        how = "for this GPU" if code == cc else f"which runs on compute capability {cc}"
        return Finding("torch-arch", PASS, title, value, f"{build} carries {code.sm} SASS, {how}",
                       None, source, {})
    if outcome.kind == "unknown":
        return Finding("torch-arch", UNKNOWN, title, value,
                       f"{build} has no SASS for {cc.sm}, and whether it embeds PTX the driver could JIT is not "
                       f"known (arch list {wheel.arch_list})",
                       "read torch.cuda.get_arch_list() on the host (a compute_XY entry is PTX)", source, {})

    remedy, requires = _suggest(cc, tables, driver)
    if outcome.kind == "ptx" and code is not None:
        if ptx_jit_blocked:
            return Finding("torch-arch", FAIL, title, value,
                           f"{build} has no SASS for {cc.sm}, only compute_{code.major}{code.minor} "
                           f"PTX, and the driver cannot JIT it: {ptx_jit_blocked}",
                           remedy, source, requires, message=NO_KERNEL_IMAGE)
        return Finding("torch-arch", WARN, title, value,
                       f"{build} has no SASS for {cc.sm}: the driver JIT-compiles its "
                       f"compute_{code.major}{code.minor} PTX at first use (slow first start)",
                       remedy, source, requires)

    warning = ""
    if not any(s.major == cc.major for s in wheel.sass):
        warning = INCOMPATIBLE_WARNING.format(name=gpu_name or "<GPU name>", cap=f"{cc.major}{cc.minor}",
                                              archs=archs) + "\n"
    return Finding("torch-arch", FAIL, title, value,
                   f"{build} has no SASS for {cc.sm} and no PTX the driver could JIT (it carries {archs})",
                   remedy, source, requires, message=warning + NO_KERNEL_IMAGE)


def check_toolkit_arch(cuda: CudaVersion, cc: ComputeCapability, tables: Tables,
                       driver: DriverVersion | None = None) -> Finding | None:
    """A toolkit that dropped the GPU's architecture (CUDA 13: Maxwell, Pascal, Volta); None when not concerned."""
    for dropped in tables.dropped:
        if cuda >= dropped.from_cuda and dropped.covers(cc):
            remedy, requires = _suggest(cc, tables, driver, cuda_below=dropped.from_cuda)
            return Finding(
                "toolkit-arch", FAIL, f"GPU vs CUDA {cuda} toolkit", f"compute capability {cc}, CUDA {cuda}",
                f"CUDA {dropped.from_cuda.release} dropped {dropped.names} ({', '.join(dropped.patterns)}): "
                f"CUDA {cuda} has no compiler or library support for compute capability {cc}",
                remedy, dropped.source, requires,
            )
    return None
