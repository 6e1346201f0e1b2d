"""One verdict for driver + CUDA + GPU + PyTorch build, used by `devenv compat` and by `devenv check`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from devenv.checks.report import PASS, UNKNOWN, WARN
from devenv.compat.arch import check_toolkit_arch, check_torch_arch
from devenv.compat.driver import check_driver
from devenv.compat.report import CompatReport, Finding
from devenv.compat.tables import GpuModel, Tables, load_tables
from devenv.compat.versions import (
    ComputeCapability,
    CudaVersion,
    DriverVersion,
    TorchBuild,
    is_not_available,
    parse_cc,
    parse_cuda,
    parse_driver,
    parse_torch,
)

_V = TypeVar("_V")
_SEGMENT = {"datacenter": "data-center", "workstation": "workstation", "consumer": "consumer"}


def _read(value: _V | str | None, parse: Callable[[str], _V]) -> _V | None:
    """Parsed value, or None for a missing/N-A value. Malformed text raises CompatInputError."""
    if isinstance(value, str):
        return None if is_not_available(value) else parse(value)
    return value  # None, or already parsed


def _gpu_finding(name: str, model: GpuModel | None, given_cc: ComputeCapability | None) -> Finding | None:
    if model is None:
        if given_cc is not None:
            return None  # the CC given is what matters; the name only informs forward compatibility
        return Finding("gpu", UNKNOWN, "GPU model", name,
                       f"{name!r} is not in devenv's GPU table, so its compute capability is not known",
                       "give --gpu-cc (nvidia-smi --query-gpu=compute_cap)", None, {})
    if given_cc is not None and given_cc != model.cc:
        return Finding("gpu", WARN, "GPU model", name,
                       f"devenv's table gives {model.name} compute capability {model.cc}, but {given_cc} was given; "
                       f"judging with {given_cc}",
                       "check nvidia-smi --query-gpu=name,compute_cap", model.source, {})
    return Finding("gpu", PASS, "GPU model", name,
                   f"{model.name}: compute capability {model.cc}, {_SEGMENT[model.segment]} GPU",
                   None, model.source, {})


def judge(
    *,
    driver: str | DriverVersion | None = None,
    cuda: str | CudaVersion | None = None,
    gpu_cc: str | ComputeCapability | None = None,
    torch_build: str | TorchBuild | None = None,
    gpu_name: str | None = None,
    torch_arch_list: Sequence[str] | None = None,
    tables: Tables | None = None,
) -> CompatReport:
    """Judge what is known; what is missing becomes "unknown", never a guess.

    Strings are parsed (nvidia-smi's "[N/A]" counts as missing); malformed ones raise CompatInputError.
    cuda is the CUDA toolkit of the image/host; a +cuXYZ torch build's own CUDA is judged against the driver too.
    torch_arch_list: torch.cuda.get_arch_list() read on the host; when given it replaces the table's list
    (torch_build is then only needed for its CUDA version and may be any build string).
    """
    tables = tables or load_tables()
    drv = _read(driver, parse_driver)
    cud = _read(cuda, parse_cuda)
    cc = _read(gpu_cc, parse_cc)
    build = _read(torch_build, parse_torch)
    name = None if is_not_available(gpu_name) else gpu_name.strip()  # type: ignore[union-attr]

    model = tables.find_gpu(name) if name else None
    findings: list[Finding] = []
    if name:
        gpu_finding = _gpu_finding(name, model, cc)
        if gpu_finding:
            findings.append(gpu_finding)
    effective_cc = cc or (model.cc if model else None)

    if cud is not None:
        findings.append(check_driver(drv, cud, tables, model))
        if effective_cc is not None:
            dropped = check_toolkit_arch(cud, effective_cc, tables, drv)
            if dropped:
                findings.append(dropped)

    torch_cuda = build.cuda if build else None
    torch_driver: Finding | None = None
    if torch_cuda is not None:
        if cud is not None and torch_cuda.release == cud.release:
            torch_driver = next(f for f in findings if f.check == "driver")
        else:
            torch_driver = check_driver(drv, torch_cuda, tables, model, via=f"torch {build}")
            findings.append(torch_driver)

    if build is not None:
        blocked = None
        if torch_driver is not None and torch_driver.status == WARN:
            blocked = (f"driver {drv} runs CUDA {torch_cuda} only through minor-version compatibility, "
                       "which cannot JIT PTX from the newer toolkit")
        findings.append(check_torch_arch(effective_cc, build, tables, name, drv, blocked, torch_arch_list))

    inputs = {
        "driver": str(drv) if drv else None,
        "cuda": str(cud) if cud else None,
        "gpu_cc": str(effective_cc) if effective_cc else None,
        "gpu_name": name,
        "torch": str(build) if build else None,
    }
    return CompatReport(inputs, tuple(findings))
