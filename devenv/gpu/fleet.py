"""GPUs across hosts (L0): what `devenv gpus` shows of each host, from one framed look per host.

The look is the occupancy frame (gpu.occupancy: GPUs, their compute processes, whose) followed, when nvidia-smi
answered, by each GPU's name and driver and the table header's CUDA version:
  @gpus ... @end      occupancy_script's frame
  @inv                index, name, driver_version lines
  @hdr                the first lines of plain `nvidia-smi` (its "CUDA Version: X.Y")
  @health             `nvidia-smi -q` (the health gate's findings: checks.health, judged in services.fleet)
  @fin
A host is ok (its GPUs), no-gpu (no driver, no nvidia-smi, no device: said plainly), error (nvidia-smi failed on
a host that has a driver: a mismatch, a lost GPU, a hang) or down (no answer within the bound).

`health` on each GPU is the health gate's word (ok | UNHEALTHY, with_health); None (shown "-") where not judged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from devenv.gpu import nvsmi
from devenv.gpu.choose import GpuState, gpu_states
from devenv.gpu.occupancy import Occupancy, Sharer, occupancy_script, parse_occupancy

OK, NO_GPU, ERROR, DOWN = "ok", "no-gpu", "error", "down"
INV_FIELDS = ("index", "name", "driver_version")
_NO_GPU_CODES = (127, 6, 9)   # nvidia-smi absent, no device, no driver (nvsmi.explain_failure's words)
_GPUS_LINE = re.compile(r"^@gpus (-?\d+)", re.MULTILINE)


def look_script(nvidia_smi: str = "nvidia-smi") -> str:
    """One round trip: the occupancy frame, then (only when nvidia-smi answered) names, driver and CUDA, and
    `nvidia-smi -q` for the health gate's word on each GPU (health_section)."""
    return occupancy_script(nvidia_smi) + f"""
if [ "$gc" = 0 ]; then
  echo "@inv"
  {nvsmi.CALL} --query-gpu={','.join(INV_FIELDS)} --format=csv,noheader,nounits 2>/dev/null
  echo "@hdr"
  {nvsmi.CALL} 2>/dev/null | head -n 4
  echo "@health"
  {nvsmi.CALL} -q 2>/dev/null
fi
echo "@fin"
"""


@dataclass(frozen=True)
class GpuRow:
    """One GPU of one host, as the table shows it."""

    index: int
    sku: str | None
    mem_used_mib: int | None
    mem_total_mib: int | None
    util_pct: int | None
    users: tuple[str, ...] = ()      # "alice (devenv-alice-cuda) python3 pid 812", one per process not ours
    health: str | None = None        # the health gate's word: ok | UNHEALTHY; None: not judged
    health_finding: str | None = None  # an UNHEALTHY GPU's first finding ('Remapped Rows > Pending: Yes')

    @property
    def mem_free_mib(self) -> int | None:
        if self.mem_total_mib is None or self.mem_used_mib is None:
            return None
        return max(0, self.mem_total_mib - self.mem_used_mib)

    @property
    def free(self) -> bool:
        return not self.users

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "sku": self.sku, "mem_free_mib": self.mem_free_mib,
                "mem_total_mib": self.mem_total_mib, "mem_used_mib": self.mem_used_mib, "util_pct": self.util_pct,
                "free": self.free, "users": list(self.users), "health": self.health,
                "health_finding": self.health_finding}


@dataclass(frozen=True)
class HostGpus:
    host: str
    state: str                       # ok | no-gpu | error | down
    gpus: tuple[GpuRow, ...] = ()
    driver: str | None = None
    cuda: str | None = None
    reason: str | None = None        # no-gpu / error / down: why, in words
    hint: str | None = None
    states: tuple[GpuState, ...] = field(default=(), compare=False)  # the pick's view (gpu.choose)

    @property
    def free_count(self) -> int:
        return sum(1 for g in self.gpus if g.free)

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "state": self.state, "driver": self.driver, "cuda": self.cuda,
                "reason": self.reason, "hint": self.hint, "gpus": [g.to_dict() for g in self.gpus]}


def describe_user(sharer: Sharer, container_names: dict[str, str] | None = None) -> str:
    """'alice (devenv-alice-cuda) python3 pid 812'; an unexplained load: 'someone (85% util, no process seen)'."""
    if sharer.pid is None:
        return f"someone ({sharer.util_pct}% util, no process seen)"
    who = sharer.user or "?"
    container = (container_names or {}).get((sharer.container or "")[:12], sharer.container)
    where = f" ({container})" if container else ""
    return f"{who}{where} {sharer.name or '?'} pid {sharer.pid}"


def parse_look(host: str, text: str, exit_code: int, t: float = 0.0, occupancy: Occupancy | None = None,
               container_names: dict[str, str] | None = None) -> HostGpus:
    """The host's table rows from look_script's output (occupancy: the frame already parsed; container_names:
    short container id -> name, from the host's engine)."""
    occ = occupancy or parse_occupancy(text, t)
    if not occ.gpus:
        found = _GPUS_LINE.search(text)
        code = int(found.group(1)) if found else exit_code
        body = text.split("\n", 1)[1] if found else text
        output = body.split("@apps", 1)[0].strip()
        what, hint = nvsmi.explain_failure(output, code)
        no_gpu = code in _NO_GPU_CODES or "sees no GPU" in what or "no NVIDIA" in what
        return HostGpus(host, NO_GPU if no_gpu else ERROR, reason=what, hint=hint)
    names: dict[int, str | None] = {}
    drivers: set[str] = set()
    inv = _section(text, "@inv", "@hdr")
    for row in nvsmi.parse_csv(inv, INV_FIELDS):
        index = nvsmi.to_int(row["index"])
        if index is not None:
            names[index] = row["name"]
        if row["driver_version"]:
            drivers.add(str(row["driver_version"]))
    header_driver, cuda = nvsmi.parse_header(_section(text, "@hdr", "@health" if "\n@health" in text else "@fin"))
    states = gpu_states(occ)
    rows = tuple(GpuRow(s.index, names.get(s.index), s.mem_used_mib, s.mem_total_mib, s.util_pct,
                        tuple(describe_user(o, container_names) for o in s.others)) for s in states)
    driver = ", ".join(sorted(drivers)) or header_driver
    return HostGpus(host, OK, rows, driver, cuda, states=tuple(states))


def health_section(text: str) -> str:
    """look_script's `nvidia-smi -q` output ("" where it did not run)."""
    return _section(text, "@health", "@fin")


def with_health(look: HostGpus, sick: dict[int, str], judged: bool) -> HostGpus:
    """The look with the health gate's word on each GPU: UNHEALTHY (and its first finding among the users'
    words' place in JSON: `health_finding`) for a sick one, ok for the others; unchanged when not judged."""
    if not judged or not look.gpus:
        return look
    rows = tuple(replace(g, health="UNHEALTHY" if g.index in sick else "ok", health_finding=sick.get(g.index))
                 for g in look.gpus)
    return replace(look, gpus=rows)


def down(host: str, reason: str, hint: str | None = None) -> HostGpus:
    return HostGpus(host, DOWN, reason=reason, hint=hint)


def _section(text: str, start: str, end: str) -> str:
    lines = text.splitlines()
    try:
        begin = lines.index(start) + 1
    except ValueError:
        return ""
    stop = lines.index(end, begin) if end in lines[begin:] else len(lines)
    return "\n".join(lines[begin:stop])


# --- the table ---------------------------------------------------------------------------------------------

# USED BY is last: its words (users, or why a host has no rows) are as long as they need to be.
COLUMNS = ("HOST", "GPU", "SKU", "MEM FREE/TOTAL", "UTIL", "HEALTH", "DRIVER/CUDA", "USED BY")


def table_rows(hosts: list[HostGpus]) -> list[tuple[str, ...]]:
    """One row per GPU; a host without GPUs (or without an answer) gets one row saying why."""
    rows: list[tuple[str, ...]] = []
    for h in hosts:
        if h.state != OK:
            word = {NO_GPU: "no GPU", DOWN: "DOWN", ERROR: "ERROR"}.get(h.state, h.state)
            rows.append((h.host, "-", word, "-", "-", "-", "-", h.reason or ""))
            continue
        versions = f"{h.driver or '?'} / {h.cuda or '?'}"
        for g in h.gpus:
            mem = f"{_gib(g.mem_free_mib)}/{_gib(g.mem_total_mib)} GiB"
            util = "?" if g.util_pct is None else f"{g.util_pct}%"
            used = "; ".join(g.users) if g.users else "free"
            rows.append((h.host, str(g.index), g.sku or "?", mem, util, g.health or "-", versions, used))
    return rows


def _gib(mib: int | None) -> str:
    return "?" if mib is None else f"{mib / 1024:.0f}"
