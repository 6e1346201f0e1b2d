"""The health facts of each GPU, read from `nvidia-smi -q` and the kernel's log (L0: pure, fed text).

`nvidia-smi -q` prints one indented block per GPU ("GPU 00000000:00:06.0"), each line `Name : value` or a
heading whose children are indented under it. parse_query() turns that into a tree per GPU; health_facts() picks
the fields a sick GPU changes (tests/fixtures/health/README.md: real H200 records and edited copies). A field
this driver does not print, or prints as N/A, is None: never guessed.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Union

from devenv.gpu.nvsmi import na

Tree = dict[str, Union[str, "Tree"]]

_GPU_HEAD = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")
# What nvidia-smi prints in a field of a GPU the driver can no longer reach.
LOST_WORDS = ("GPU is lost", "Unknown Error")


def parse_query(text: str) -> list[tuple[str, Tree]]:
    """(PCI bus id, tree) per GPU block of `nvidia-smi -q`, in the order printed."""
    gpus: list[tuple[str, Tree]] = []
    stack: list[tuple[int, Tree]] = []
    for raw in text.splitlines():
        if not raw.strip():
            continue
        head = _GPU_HEAD.match(raw)
        if head:
            root: Tree = {}
            gpus.append((head.group(1).upper(), root))
            stack = [(-1, root)]
            continue
        if not stack:
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        name, colon, value = raw.strip().partition(":")
        name = name.strip()
        while len(stack) > 1 and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        if colon and value.strip():
            parent.setdefault(name, value.strip())
        else:  # a heading (or "Processes : None"-like empty value): its children follow, indented
            child: Tree = {}
            existing = parent.get(name)
            if isinstance(existing, dict):
                child = existing
            else:
                parent[name] = child
            stack.append((indent, child))
    return gpus


def get(tree: Tree, *path: str) -> str | None:
    """The value at path ("ECC Errors", "Volatile", "DRAM Uncorrectable"), None when absent or a heading."""
    node: str | Tree = tree
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node.strip() if isinstance(node, str) else None


def _count(value: str | None) -> int | None:
    value = na(value)
    if value is None:
        return None
    m = re.match(r"\d+", value)
    return int(m.group(0)) if m else None


def _yes(value: str | None) -> bool | None:
    value = na(value)
    if value is None:
        return None
    return value.lower() in ("yes", "active", "enabled", "true")


@dataclass(frozen=True)
class Field:
    """A value and where it came from, for the finding's words ("Remapped Rows > Pending: Yes")."""

    path: str
    value: str | None


@dataclass(frozen=True)
class GpuHealth:
    """What nvidia-smi -q says about one GPU's health. Every count may be None (the driver does not say)."""

    bus_id: str
    index: int | None = None
    uuid: str | None = None
    name: str | None = None
    util_pct: int | None = None
    ecc_mode: str | None = None            # Enabled | Disabled | None (not supported)
    ecc_pending: str | None = None
    volatile_uncorrectable: int | None = None    # since the driver loaded (SRAM + DRAM)
    aggregate_uncorrectable: int | None = None   # over the GPU's life
    sram_threshold_exceeded: bool | None = None
    retired_sbe: int | None = None
    retired_dbe: int | None = None
    retired_pending: bool | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    remap_uncorrectable: int | None = None
    remap_banks_low: int | None = None     # histogram: banks with Low or None spare rows left
    remap_banks_none: int | None = None
    link_gen: int | None = None
    link_gen_max: int | None = None        # the lower of the device's and the host's max where both are given
    link_width: int | None = None
    link_width_max: int | None = None
    slowdowns: tuple[str, ...] = ()        # active clocks event reasons that are faults (HW ..., SW Thermal)
    persistence: str | None = None
    recovery_action: str | None = None     # "GPU Recovery Action" (drivers 570+): None, Reset, Reboot, Drain...
    lost: tuple[Field, ...] = ()           # fields that read "GPU is lost" / "Unknown Error"
    fields: dict[str, str | None] = field(default_factory=dict)  # the raw fields judged, by path

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# (the -q heading under "Clocks Event Reasons" (older drivers: "Clocks Throttle Reasons"), the word used)
SLOWDOWN_FIELDS = (
    (("HW Slowdown",), "HW Slowdown"),
    (("HW Slowdown", "HW Thermal Slowdown"), "HW Thermal Slowdown"),
    (("HW Slowdown", "HW Power Brake Slowdown"), "HW Power Brake Slowdown"),
    (("HW Thermal Slowdown",), "HW Thermal Slowdown"),
    (("HW Power Brake Slowdown",), "HW Power Brake Slowdown"),
    (("SW Thermal Slowdown",), "SW Thermal Slowdown"),
)


UNCORRECTABLE_KEYS = (("SRAM Uncorrectable Parity",), ("SRAM Uncorrectable SEC-DED",), ("SRAM Uncorrectable",),
                      ("DRAM Uncorrectable",), ("Double Bit", "Total"))


def health_facts(bus_id: str, tree: Tree, index: int | None = None) -> GpuHealth:
    """The health fields of one GPU block of `nvidia-smi -q`."""
    fields: dict[str, str | None] = {}

    def read(*path: str) -> str | None:
        value = get(tree, *path)
        if value is not None:
            fields[" > ".join(path)] = value
        return value

    def uncorrectable(scope: str) -> int | None:
        # Ampere and later: SRAM/DRAM counters; older GPUs: "Double Bit > Total"
        counts = [_count(read("ECC Errors", scope, *key)) for key in UNCORRECTABLE_KEYS]
        found = [n for n in counts if n is not None]
        return sum(found) if found else None
    clocks = "Clocks Event Reasons" if isinstance(tree.get("Clocks Event Reasons"), dict) else "Clocks Throttle Reasons"
    slowdowns = []
    for path, word in SLOWDOWN_FIELDS:
        if _yes(read(clocks, *path)) and word not in slowdowns:
            slowdowns.append(word)
    if len(slowdowns) > 1 and "HW Slowdown" in slowdowns:
        slowdowns.remove("HW Slowdown")  # its sub-reason says more
    gen_max = [g for g in (_count(read("PCI", "GPU Link Info", "PCIe Generation", "Device Max")),
                           _count(read("PCI", "GPU Link Info", "PCIe Generation", "Host Max")),
                           _count(read("PCI", "GPU Link Info", "PCIe Generation", "Max"))) if g]
    lost = tuple(Field(path, value) for path, value in _walk(tree)
                 if any(word.lower() in value.lower() for word in LOST_WORDS))
    minor = _count(get(tree, "Minor Number"))
    return GpuHealth(
        bus_id=bus_id, index=index if index is not None else minor, uuid=na(read("GPU UUID")),
        name=na(read("Product Name")), util_pct=_count(read("Utilization", "GPU")),
        ecc_mode=na(read("ECC Mode", "Current")), ecc_pending=na(read("ECC Mode", "Pending")),
        volatile_uncorrectable=uncorrectable("Volatile"), aggregate_uncorrectable=uncorrectable("Aggregate"),
        sram_threshold_exceeded=_yes(read("ECC Errors", "Aggregate", "SRAM Threshold Exceeded")),
        retired_sbe=_count(read("Retired Pages", "Single Bit ECC")),
        retired_dbe=_count(read("Retired Pages", "Double Bit ECC")),
        retired_pending=_yes(read("Retired Pages", "Pending Page Blacklist")
                             or read("Retired Pages", "Pending Page Retirement")),
        remap_pending=_yes(read("Remapped Rows", "Pending")),
        remap_failure=_yes(read("Remapped Rows", "Remapping Failure Occurred")),
        remap_uncorrectable=_count(read("Remapped Rows", "Uncorrectable Error")),
        remap_banks_low=_count(read("Remapped Rows", "Bank Remap Availability Histogram", "Low")),
        remap_banks_none=_count(read("Remapped Rows", "Bank Remap Availability Histogram", "None")),
        link_gen=_count(read("PCI", "GPU Link Info", "PCIe Generation", "Current")),
        link_gen_max=min(gen_max) if gen_max else None,
        link_width=_count(read("PCI", "GPU Link Info", "Link Width", "Current")),
        link_width_max=_count(read("PCI", "GPU Link Info", "Link Width", "Max")),
        slowdowns=tuple(slowdowns), persistence=na(read("Persistence Mode")),
        recovery_action=na(read("GPU Recovery Action")), lost=lost, fields=fields)


def _walk(tree: Tree, prefix: str = "") -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for key, value in tree.items():
        path = f"{prefix} > {key}" if prefix else key
        if isinstance(value, dict):
            out += _walk(value, path)
        else:
            out.append((path, value))
    return out


def parse_health(text: str) -> list[GpuHealth]:
    """Every GPU of an `nvidia-smi -q` output, numbered in the order printed (nvidia-smi's own index order)."""
    return [health_facts(bus, tree, k) for k, (bus, tree) in enumerate(parse_query(text))]


# --- the kernel's log: Xid errors --------------------------------------------------------------------------

# "NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus."
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f:.]+)\): (\d+)(?:, (.*))?")


@dataclass(frozen=True)
class Xid:
    bus_id: str     # as the kernel prints it (domain:bus:device, no function)
    code: int
    text: str       # the rest of the line

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_xids(text: str) -> list[Xid]:
    """The Xid lines of `dmesg` / `journalctl -k` output, in order."""
    out = []
    for line in text.splitlines():
        m = _XID.search(line)
        if m:
            out.append(Xid(m.group(1).upper(), int(m.group(2)), (m.group(3) or "").strip()))
    return out


def same_gpu(xid_bus: str, bus_id: str) -> bool:
    """The kernel's "0000:3b:00" names nvidia-smi's "00000000:3B:00.0" (domain widths differ)."""
    def key(bus: str) -> tuple[int, int, int] | None:
        parts = bus.split(".")[0].split(":")
        if len(parts) < 3:
            return None
        try:
            return int(parts[-3], 16), int(parts[-2], 16), int(parts[-1], 16)
        except ValueError:
            return None
    a, b = key(xid_bus), key(bus_id)
    return a is not None and a == b
