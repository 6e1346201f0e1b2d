"""Words and numbers for GPU samples (L0), shared by `devenv monitor --once` and the TUI: NA shows as "-",
never as 0, and a gpustat-like plain-text table for scripts and terminals without a TUI."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Protocol

from devenv.gpu.sample import GpuSample, HostStats, ProcessSample

NA = "-"


def num(value: object, fmt: str = "{:.0f}", unit: str = "") -> str:
    return NA if value is None else fmt.format(value) + unit


def mem(gpu: GpuSample) -> str:
    return f"{num(gpu.mem_used_mib)} / {num(gpu.mem_total_mib)} MiB"


def power(gpu: GpuSample) -> str:
    return f"{num(gpu.power_w)} / {num(gpu.power_limit_w)} W"


def mem_short(gpu: GpuSample) -> str:
    """'78/140G': memory in 10 cells, for narrow terminals."""
    def gib(v: float | None) -> str:
        return NA if v is None else f"{v / 1024:.0f}" if v >= 10240 else f"{v / 1024:.1f}"
    return f"{gib(gpu.mem_used_mib)}/{gib(gpu.mem_total_mib)}G"


def power_short(gpu: GpuSample) -> str:
    return f"{num(gpu.power_w)}/{num(gpu.power_limit_w)}W"


def clock(gpu: GpuSample) -> str:
    return f"{num(gpu.sm_clock_mhz)} / {num(gpu.sm_clock_max_mhz)} MHz"


def throttle(gpu: GpuSample) -> str:
    reasons = gpu.throttle_reasons
    if reasons is None:
        return NA
    return ", ".join(reasons) if reasons else "none"


def mib(value: int | None) -> str:
    if value is None:
        return NA
    return f"{value / 1024:.1f}G" if value >= 10240 else f"{value}M"


def clock_time(t: float | None) -> str:
    return NA if t is None else time.strftime("%H:%M:%S", time.localtime(t))


def age(t: float | None, now: float) -> str:
    if t is None:
        return "never"
    seconds = max(0.0, now - t)
    if seconds < 60:
        return f"{seconds:.1f} s ago" if seconds < 10 else f"{seconds:.0f} s ago"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"


def duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def process_label(p: ProcessSample) -> str:
    """user:name/pid(memory)[@container] -- the way gpustat lists processes, plus the container."""
    name = (p.name or "?").rsplit("/", 1)[-1]
    where = f"@{p.container}" if p.container else ""
    return f"{p.user or '?'}:{name}/{p.pid}({mib(p.used_mib)}){where}"


def gib(kib: int | None) -> str:
    """KiB as GiB: one decimal under 10 GiB, whole above ('1.5', '126')."""
    if kib is None:
        return NA
    value = kib / 1024 ** 2
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"


def used_of(used: int | None, total: int | None) -> str:
    return f"{gib(used)} / {gib(total)} GiB"


def pct_of(used: int | None, total: int | None) -> float | None:
    return None if used is None or not total else 100.0 * used / total


def host_parts(h: HostStats) -> list[tuple[str, str, float | None]]:
    """The host line's parts, in order, as (label, value, percent used or None): CPU, load, RAM, swap, disk.
    An NA value shows as "-"; a host without swap says "none" (not 0 / 0)."""
    cpu = num(h.cpu_pct, unit=" %") + (f" of {h.ncpu}" if h.ncpu else "")
    swap = ("none" if h.swap_total_kib == 0 else NA if h.swap_total_kib is None
            else used_of(h.swap_used_kib, h.swap_total_kib))
    parts = [("CPU", cpu, h.cpu_pct), ("load", num(h.load1, "{:.2f}"), None),
             ("RAM", used_of(h.mem_used_kib, h.mem_total_kib), pct_of(h.mem_used_kib, h.mem_total_kib)),
             ("swap", swap, pct_of(h.swap_used_kib, h.swap_total_kib))]
    if h.disk_total_kib:
        parts.append((f"disk {h.disk_mount or ''}".rstrip(), used_of(h.disk_used_kib, h.disk_total_kib),
                      pct_of(h.disk_used_kib, h.disk_total_kib)))
    return parts


def host_summary(h: HostStats) -> str:
    """'CPU 37 % of 16  load 0.23  RAM 1.5 / 126 GiB  swap none  disk / 16 / 252 GiB' (monitor --once)."""
    return "  ".join(f"{label} {value}" for label, value, _ in host_parts(h))


class Snapshot(Protocol):
    """What once_table prints of a host (services.monitor.HostSnapshot; gpu is L0 and cannot import it)."""

    @property
    def host(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def t(self) -> float: ...
    @property
    def last_sample_t(self) -> float | None: ...
    @property
    def driver_version(self) -> str | None: ...
    @property
    def message(self) -> str | None: ...
    @property
    def hint(self) -> str | None: ...
    @property
    def gpus(self) -> Sequence[GpuSample]: ...
    @property
    def processes(self) -> Sequence[ProcessSample]: ...
    @property
    def processes_error(self) -> str | None: ...
    @property
    def host_stats(self) -> HostStats | None: ...
    def processes_on(self, gpu: GpuSample) -> list[ProcessSample]: ...


def once_table(snapshots: Iterable[Snapshot], now: float | None = None) -> str:
    """One header line per host, one line per GPU with its processes (gpustat style)."""
    now = time.time() if now is None else now
    lines = []
    for snap in snapshots:
        head = f"{snap.host}  {snap.state}"
        if snap.driver_version:
            head += f"  driver {snap.driver_version}"
        head += f"  {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(snap.last_sample_t or snap.t))}"
        lines.append(head)
        job = getattr(snap, "job", None)
        if job is not None:  # a node of a Slurm job
            lines.append(f"  {job.describe()}")
        if snap.message:
            lines.append(f"  {snap.message}" + (f" (hint: {snap.hint})" if snap.hint else ""))
        if snap.host_stats is not None:  # also for a host without a GPU
            lines.append(f"  host: {host_summary(snap.host_stats)}")
        rows = []
        for gpu in snap.gpus:
            procs = " ".join(process_label(p) for p in snap.processes_on(gpu))
            rows.append([f"[{num(gpu.index)}] {gpu.name or NA}", f"{num(gpu.temp_c, unit='°C')}",
                         f"{num(gpu.util_pct, unit=' %')}", mem(gpu), power(gpu), clock(gpu),
                         f"ECC {num(gpu.ecc_uncorrected)}", throttle(gpu), procs])
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))] if rows else []
        for r in rows:
            cells = [c.rjust(w) if i in (1, 2, 3, 4, 5) else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))]
            lines.append("  " + " | ".join(cells[:-1]).rstrip() + (" | " + cells[-1].rstrip() if r[-1] else ""))
        if snap.processes_error and snap.state == "ok":
            lines.append(f"  processes: {snap.processes_error}")
        unplaced = [p for p in snap.processes if not any(p.gpu_uuid == g.uuid for g in snap.gpus)]
        if unplaced:
            lines.append("  other GPU processes: " + " ".join(process_label(p) for p in unplaced))
    return "\n".join(lines)
