"""CUDA / driver / GPU architecture / PyTorch build compatibility (L0: stdlib + pyyaml, data in compat/data/).

    from devenv.compat import judge
    report = judge(driver="580.159.04", cuda="12.8", gpu_name="NVIDIA H200", torch_build="2.8.0+cu128")
    report.verdict  # "pass" | "warn" | "fail" | "unknown";  report.to_dict() for JSON
"""

from devenv.checks.report import FAIL, PASS, UNKNOWN, WARN, Status
from devenv.compat.arch import (
    BuildSuggestion,
    builds_for,
    check_toolkit_arch,
    check_torch_arch,
)
from devenv.compat.driver import check_driver
from devenv.compat.judge import judge
from devenv.compat.report import CompatReport, Finding
from devenv.compat.tables import GpuModel, Tables, load_tables, wheel_from_arch_list
from devenv.compat.versions import (
    CompatInputError,
    ComputeCapability,
    CudaVersion,
    DriverVersion,
    TorchBuild,
    parse_cc,
    parse_cuda,
    parse_driver,
    parse_torch,
)

__all__ = [
    "judge", "CompatReport", "Finding", "Status", "PASS", "WARN", "FAIL", "UNKNOWN",
    "check_driver", "check_torch_arch", "check_toolkit_arch", "builds_for", "BuildSuggestion",
    "load_tables", "Tables", "GpuModel", "wheel_from_arch_list",
    "CompatInputError", "DriverVersion", "CudaVersion", "ComputeCapability", "TorchBuild",
    "parse_driver", "parse_cuda", "parse_cc", "parse_torch",
]
