"""Turns compat findings into `check` results for the GPUs a host really has (L0).

What the environment carries comes from the image's labels when the image is already on the host (the truth),
else from the environment profile (a declaration). On the host runtime, the host python's own torch is judged too.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from devenv import compat
from devenv.checks.host import status_of
from devenv.checks.report import SKIP, WARN, CheckResult
from devenv.compat import CompatReport
from devenv.config.profiles import EnvProfile
from devenv.errors import DevenvError
from devenv.gpu.nvsmi import GpuInfo


def compat_checks(env: EnvProfile, inventory: list[GpuInfo], image: dict[str, Any] | None,
                  host_python: dict[str, Any] | None = None) -> list[CheckResult]:
    cuda = (image or {}).get("cuda") or env.cuda
    torch = (image or {}).get("torch") or env.torch
    origin = "image labels" if image and (image.get("cuda") or image.get("torch")) else f"env '{env.name}'"
    if not cuda and not (torch and "+cu" in torch):
        return [CheckResult("compat", "CUDA compatibility", SKIP, f"{origin}: CPU-only, no CUDA to match")]
    if not inventory:
        return [CheckResult("compat", "CUDA compatibility", SKIP,
                            f"{origin} carries CUDA {cuda or torch}, but there is no GPU to judge it against")]
    results = []
    for gpu in _distinct_models(inventory):
        label = origin if len(inventory) == 1 else f"{origin}, GPU {gpu.index}"
        results += _judged(f"compat.{gpu.index}", label,
                           partial(compat.judge, driver=gpu.driver_version, cuda=cuda,
                                   gpu_cc=gpu.compute_capability, torch_build=torch, gpu_name=gpu.name))
        if host_python and host_python.get("cuda"):
            build = _torch_build(host_python)
            results += _judged(f"compat.host.{gpu.index}", "host python" if len(inventory) == 1 else
                               f"host python, GPU {gpu.index}",
                               partial(compat.judge, driver=gpu.driver_version, cuda=None,
                                       gpu_cc=gpu.compute_capability, torch_build=build, gpu_name=gpu.name,
                                       torch_arch_list=host_python.get("arch_list") or None))
    return results


def _judged(check_id: str, label: str, judge: Callable[[], CompatReport]) -> list[CheckResult]:
    try:
        report = judge()
    except DevenvError as exc:  # a version nvidia-smi printed that compat cannot read: say so, don't crash
        return [CheckResult(check_id, f"Compatibility: {label}", WARN, exc.message, exc.hint)]
    out = []
    for finding in report.findings:
        if finding.check == "gpu" and finding.status == "pass":
            continue  # the GPU line of `check` already says the model
        out.append(CheckResult(
            f"{check_id}.{finding.check}", f"{finding.title} ({label})", status_of(finding.status),
            f"{finding.value}: {finding.reason}", finding.remedy,
            {"source": finding.source, "requires": dict(finding.requires), "compat_status": finding.status},
        ))
    return out


def _torch_build(host_python: dict[str, Any]) -> str:
    version = str(host_python.get("torch", ""))
    if "+" in version:
        return version
    cuda = str(host_python.get("cuda") or "")
    return f"{version}+cu{cuda.replace('.', '')}" if cuda else f"{version}+cpu"


def _distinct_models(inventory: list[GpuInfo]) -> list[GpuInfo]:
    """One GPU per (model, compute capability): eight identical GPUs are judged once."""
    seen: dict[tuple[str | None, str | None, str | None], GpuInfo] = {}
    for gpu in inventory:
        seen.setdefault((gpu.name, gpu.compute_capability, gpu.driver_version), gpu)
    return list(seen.values())
