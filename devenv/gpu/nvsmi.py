"""Parsing nvidia-smi output (L0). A field nvidia-smi cannot read becomes None (NA), never an exception.

nvidia-smi's text is "not guaranteed to be backwards compatible", so we only read the stable machine formats
(`--query-gpu ... --format=csv,noheader,nounits`) plus the one header line that carries the driver's CUDA version.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

# Values nvidia-smi prints where a field is unsupported or unreadable.
NA_VALUES = {"", "N/A", "[N/A]", "[Not Supported]", "[Insufficient Permissions]", "[Unknown Error]",
             "[GPU is lost]", "[Requires Pstate]", "Not Supported"}

INVENTORY_FIELDS = ("index", "uuid", "name", "driver_version", "memory.total", "compute_cap", "pci.bus_id")


def query_command(fields: tuple[str, ...] | list[str]) -> str:
    return f"nvidia-smi --query-gpu={','.join(fields)} --format=csv,noheader,nounits"


# Where nvidia-smi lives when a session's PATH lacks it: the driver packages' /usr/bin, WSL2's
# /usr/lib/wsl/lib (on PATH only in login shells there), NVIDIA's container images' /usr/local/nvidia/bin.
SEARCH_DIRS = ("/usr/bin", "/usr/local/bin", "/usr/lib/wsl/lib", "/usr/local/nvidia/bin")
# A wedged driver makes nvidia-smi hang; a healthy one answers a query in well under a second.
ANSWER_S = 10
CALL = "nvidia_smi"  # the shell function preamble() defines


_NOW = -1  # preamble's default limit: ANSWER_S as it is when called


def preamble(nvidia_smi: str = "nvidia-smi", limit_s: int | None = _NOW) -> str:
    """Shell lines to put before commands that call nvidia-smi as `nvidia_smi` (CALL): PATH gets SEARCH_DIRS
    appended, and each call is cut off after limit_s (exit 124, explain_failure says so) where `timeout`
    exists. limit_s None: PATH only (for a stream that is meant to run on)."""
    path = 'PATH="${PATH:+$PATH:}' + ":".join(SEARCH_DIRS) + '"; export PATH; '
    limit_s = ANSWER_S if limit_s == _NOW else limit_s
    if limit_s is None:
        return path
    return (path + f'{CALL}() {{ if command -v timeout >/dev/null 2>&1; then timeout -k 2 {limit_s} {nvidia_smi} "$@"; '
            f'else {nvidia_smi} "$@"; fi; }}\n')


INVENTORY_COMMAND = query_command(INVENTORY_FIELDS)
# The plain table's first lines hold "CUDA Version: X.Y", the newest CUDA this driver supports.
HEADER_COMMAND = "nvidia-smi | head -n 4"


def na(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    return None if value in NA_VALUES else value


def to_float(value: str | None) -> float | None:
    value = na(value)
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        return None


def to_int(value: str | None) -> int | None:
    number = to_float(value)
    return int(number) if number is not None else None


def parse_csv(text: str, fields: tuple[str, ...] | list[str]) -> list[dict[str, str | None]]:
    """Rows of `--format=csv,noheader,nounits` as dicts; NA values are None; short rows are padded with None."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        raw = line.split(",")
        if len(raw) > len(fields):  # a name containing a comma: join the overflow back into the name column
            extra = len(raw) - len(fields)
            name_at = list(fields).index("name") if "name" in fields else 0
            raw = raw[:name_at] + [",".join(raw[name_at:name_at + extra + 1])] + raw[name_at + extra + 1:]
        cells = [na(c) for c in raw] + [None] * (len(fields) - len(raw))
        rows.append(dict(zip(fields, cells)))
    return rows


@dataclass(frozen=True)
class GpuInfo:
    index: int | None
    uuid: str | None
    name: str | None
    driver_version: str | None
    memory_total_mib: int | None
    compute_capability: str | None
    pci_bus_id: str | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_inventory(text: str) -> list[GpuInfo]:
    return [
        GpuInfo(
            index=to_int(row["index"]),
            uuid=row["uuid"],
            name=row["name"],
            driver_version=row["driver_version"],
            memory_total_mib=to_int(row["memory.total"]),
            compute_capability=row["compute_cap"],
            pci_bus_id=row["pci.bus_id"],
        )
        for row in parse_csv(text, INVENTORY_FIELDS)
    ]


_CUDA_RE = re.compile(r"CUDA Version:\s*([0-9]+\.[0-9]+)")
_DRIVER_RE = re.compile(r"Driver Version:\s*([0-9.]+)")


def parse_header(text: str) -> tuple[str | None, str | None]:
    """(driver version, newest CUDA the driver supports) from nvidia-smi's table header."""
    cuda = _CUDA_RE.search(text)
    driver = _DRIVER_RE.search(text)
    return (driver.group(1) if driver else None, cuda.group(1) if cuda else None)


def explain_failure(output: str, exit_code: int) -> tuple[str, str]:
    """(what is wrong, remedy) for a failing nvidia-smi, from its exit code and words."""
    text = output.lower()
    if exit_code == 127 or "not found" in text and "nvidia-smi" in text:
        return ("no NVIDIA driver: nvidia-smi is not installed on this host",
                "install the NVIDIA driver (e.g. `apt install nvidia-driver` / `ubuntu-drivers install`)")
    if exit_code in (124, 137):
        return (f"nvidia-smi did not answer within {ANSWER_S} s (a hung driver or a GPU in a bad state)",
                "look for Xid errors (`sudo dmesg | grep -i xid`) and processes stuck in D state; the GPU may need "
                "a reset (`nvidia-smi -r`) or the host a reboot")
    if "driver/library version mismatch" in text or exit_code == 18:
        return ("the NVIDIA kernel module and the user-space driver libraries differ in version (the driver was "
                "upgraded but the old module is still loaded)",
                "reboot the host (or unload and reload the nvidia modules); check `cat /proc/driver/nvidia/version` "
                "against `nvidia-smi --version`")
    lost = re.search(r"unable to determine the device handle for gpu\s*"
                     r"([0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f])", text)
    if lost or "gpu is lost" in text or exit_code == 15:
        where = f"the GPU at PCI {lost.group(1).upper()}" if lost else "a GPU"
        return (f"{where} is lost (fallen off the bus): nvidia-smi lists none of the host's GPUs while it is",
                "look for Xid 79 in `sudo dmesg | grep -i xid`; the GPU needs a reset or the host a reboot; "
                "until then `nvidia-smi -i <index>` still shows the healthy GPUs")
    if "failed to initialize nvml" in text or exit_code == 12:
        last = output.strip().splitlines()[-1] if output.strip() else "no output"
        return (f"nvidia-smi cannot initialise NVML: {last}",
                "reinstall or repair the NVIDIA driver (its libnvidia-ml.so); check `dmesg | grep -i nvrm`")
    if "couldn't communicate with the nvidia driver" in text or exit_code == 9:
        return ("nvidia-smi is installed but cannot talk to the NVIDIA driver (module not loaded, or a "
                "driver/library version mismatch after an upgrade)",
                "reboot after a driver upgrade, or load the module (`sudo modprobe nvidia`); "
                "check `dmesg | grep -i nvrm`")
    if "no devices were found" in text or exit_code == 6:
        return ("the NVIDIA driver sees no GPU",
                "check that the GPU is attached (`lspci | grep -i nvidia`) and not held by vfio")
    if "insufficient permissions" in text or exit_code == 4:
        return ("nvidia-smi lacks permission to read the GPU", "check /dev/nvidia* permissions for this user")
    last = output.strip().splitlines()[-1] if output.strip() else "no output"
    return (f"nvidia-smi failed with exit code {exit_code}: {last}",
            "run nvidia-smi on the host to see the full error")
