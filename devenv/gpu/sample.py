"""GPU and GPU-process samples for `devenv monitor` (L0): parsing nvidia-smi's machine formats, decoding
clock-event (throttle) reasons, and a bounded per-GPU history that records gaps instead of hiding them.

A field nvidia-smi cannot read is None (NA) in a sample, never an exception. Timestamps are the laptop's
clock when a line arrived (epoch seconds): nvidia-smi's own clock may differ from ours.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

from devenv.gpu.nvsmi import NA_VALUES, parse_csv, query_command
from devenv.gpu.nvsmi import to_float as _float
from devenv.gpu.nvsmi import to_int as _int

# What one streamed line carries (order matters: it is the CSV column order).
GPU_FIELDS = (
    "index", "uuid", "name", "driver_version", "pci.bus_id",
    "memory.total", "memory.used", "memory.free", "utilization.gpu", "utilization.memory",
    "temperature.gpu", "power.draw", "power.limit", "clocks.sm", "clocks.max.sm", "clocks.mem",
    "pcie.link.gen.current", "pcie.link.width.current", "compute_cap",
    "ecc.errors.uncorrected.volatile.total", "clocks_event_reasons.active", "fan.speed", "pstate",
    "mig.mode.current", "persistence_mode",
)
# Older drivers (< 535) know the clock-event bitmask only under its old name.
FIELD_ALIASES = {"clocks_event_reasons.active": "clocks_throttle_reasons.active"}
APP_FIELDS = ("pid", "process_name", "used_memory", "gpu_uuid")
# Values compute-apps prints for a process that is exiting, on top of the usual NA spellings.
_APP_NA = {"[No data]", "[Not Found]"}

# NVML's nvmlClocksEventReason* bits (nvml.h; same values as the older nvmlClocksThrottleReason*).
THROTTLE_REASONS = (
    (0x1, "idle"),
    (0x2, "app clocks"),
    (0x4, "sw power cap"),
    (0x8, "hw slowdown"),
    (0x10, "sync boost"),
    (0x20, "sw thermal"),
    (0x40, "hw thermal"),
    (0x80, "hw power brake"),
    (0x100, "display clocks"),
)
# Reasons that mean the GPU is slower than it could be because of power, heat or hardware (not just idle).
SLOWDOWN_REASONS = frozenset({"sw power cap", "hw slowdown", "sw thermal", "hw thermal", "hw power brake"})


def gpu_query_command(fields: Iterable[str] = GPU_FIELDS, nvidia_smi: str = "nvidia-smi") -> str:
    command = query_command(tuple(fields))
    return command.replace("nvidia-smi", nvidia_smi, 1)


def apps_query_command(nvidia_smi: str = "nvidia-smi") -> str:
    return f"{nvidia_smi} --query-compute-apps={','.join(APP_FIELDS)} --format=csv,noheader,nounits"


_INVALID_FIELD_RE = re.compile(r'Field "([^"]+)" is not a valid field to query')


def invalid_field(output: str) -> str | None:
    """The field nvidia-smi rejected ('Field "x" is not a valid field to query.', exit code 2), if any."""
    match = _INVALID_FIELD_RE.search(output)
    return match.group(1) if match else None


def decode_throttle(mask: int | None) -> tuple[str, ...] | None:
    """Words for the set bits of a clocks_event_reasons bitmask; unknown bits as hex. None stays NA."""
    if mask is None:
        return None
    words = [word for bit, word in THROTTLE_REASONS if mask & bit]
    unknown = mask & ~sum(bit for bit, _ in THROTTLE_REASONS)
    if unknown:
        words.append(f"0x{unknown:x}")
    return tuple(words)


def _mask(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value, 16) if value.lower().startswith("0x") else int(value)
    except ValueError:
        return None


@dataclass(frozen=True)
class GpuSample:
    """One GPU at one moment. Every metric may be None (NA)."""

    t: float
    index: int | None
    uuid: str | None = None
    name: str | None = None
    driver_version: str | None = None
    pci_bus_id: str | None = None
    util_pct: int | None = None
    mem_util_pct: int | None = None
    mem_used_mib: int | None = None
    mem_total_mib: int | None = None
    temp_c: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: int | None = None
    sm_clock_max_mhz: int | None = None
    mem_clock_mhz: int | None = None
    ecc_uncorrected: int | None = None
    throttle_mask: int | None = None
    fan_pct: int | None = None
    pstate: str | None = None
    mig_mode: str | None = None
    persistence: str | None = None

    @property
    def throttle_reasons(self) -> tuple[str, ...] | None:
        return decode_throttle(self.throttle_mask)

    @property
    def slowed_by(self) -> tuple[str, ...]:
        """The active reasons that cost performance (power cap, heat, hardware), not merely 'idle'."""
        return tuple(r for r in (self.throttle_reasons or ()) if r in SLOWDOWN_REASONS)

    @property
    def mem_pct(self) -> float | None:
        if self.mem_used_mib is None or not self.mem_total_mib:
            return None
        return 100.0 * self.mem_used_mib / self.mem_total_mib

    def metric(self, name: str) -> float | None:
        """A metric by name for history series: util, mem, temp, power, sm_clock."""
        return {
            "util": self.util_pct, "mem": self.mem_pct, "temp": self.temp_c,
            "power": self.power_w, "sm_clock": self.sm_clock_mhz,
        }[name]

    def to_dict(self) -> dict:
        data = asdict(self)
        data["throttle_reasons"] = list(self.throttle_reasons) if self.throttle_reasons is not None else None
        return data


def _gpu_from_row(row: dict[str, str | None], t: float) -> GpuSample:
    return GpuSample(
        t=t,
        index=_int(row.get("index")),
        uuid=row.get("uuid"),
        name=row.get("name"),
        driver_version=row.get("driver_version"),
        pci_bus_id=row.get("pci.bus_id"),
        util_pct=_int(row.get("utilization.gpu")),
        mem_util_pct=_int(row.get("utilization.memory")),
        mem_used_mib=_int(row.get("memory.used")),
        mem_total_mib=_int(row.get("memory.total")),
        temp_c=_int(row.get("temperature.gpu")),
        power_w=_float(row.get("power.draw")),
        power_limit_w=_float(row.get("power.limit")),
        sm_clock_mhz=_int(row.get("clocks.sm")),
        sm_clock_max_mhz=_int(row.get("clocks.max.sm")),
        mem_clock_mhz=_int(row.get("clocks.mem")),
        ecc_uncorrected=_int(row.get("ecc.errors.uncorrected.volatile.total")),
        throttle_mask=_mask(row.get("clocks_event_reasons.active") or row.get("clocks_throttle_reasons.active")),
        fan_pct=_int(row.get("fan.speed")),
        pstate=row.get("pstate"),
        mig_mode=row.get("mig.mode.current"),
        persistence=row.get("persistence_mode"),
    )


def parse_gpu_line(line: str, t: float, fields: tuple[str, ...] = GPU_FIELDS) -> GpuSample | None:
    """One `--query-gpu ... --format=csv,noheader,nounits` line; None for a blank line or one that is not a
    sample (an error message in the stream has fewer columns and no numeric index)."""
    rows = parse_csv(line, fields)
    if not rows:
        return None
    row = rows[0]
    if "index" in fields and _int(row.get("index")) is None:
        return None
    if line.count(",") < len(fields) - 1:
        return None
    return _gpu_from_row(row, t)


def parse_gpu_csv(text: str, t: float, fields: tuple[str, ...] = GPU_FIELDS) -> list[GpuSample]:
    return [s for s in (parse_gpu_line(line, t, fields) for line in text.splitlines()) if s is not None]


@dataclass(frozen=True)
class ProcessSample:
    """A compute process on a GPU. user and container come from the host's ps and /proc/<pid>/cgroup."""

    pid: int
    name: str | None
    used_mib: int | None
    gpu_uuid: str | None
    user: str | None = None
    container: str | None = None   # container id (12 hex) or name, when the cgroup tells

    def to_dict(self) -> dict:
        return asdict(self)


def parse_apps_csv(text: str) -> list[ProcessSample]:
    """`--query-compute-apps=pid,process_name,used_memory,gpu_uuid --format=csv,noheader,nounits`."""
    found = []
    for row in parse_csv(text, APP_FIELDS):
        pid = _int(row["pid"])
        if pid is None:
            continue
        name = None if row["process_name"] in _APP_NA else row["process_name"]
        found.append(ProcessSample(pid=pid, name=name, used_mib=_int(row["used_memory"]), gpu_uuid=row["gpu_uuid"]))
    return found


# Container runtimes name a container's cgroup after its 64-hex id: docker-<id>.scope (systemd driver),
# /docker/<id> (cgroupfs), cri-containerd-<id>.scope, crio-<id>, libpod-<id> (podman).
_CGROUP_ID_RE = re.compile(r"(?:docker|cri-containerd|crio|libpod)[-/]([0-9a-f]{64})")


def container_from_cgroup(lines: Iterable[str]) -> str | None:
    """The short (12 hex) container id a process's /proc/<pid>/cgroup lines name, or None (not containerised)."""
    for line in lines:
        match = _CGROUP_ID_RE.search(line)
        if match:
            return match.group(1)[:12]
    return None


# --- the process loop's framed output ---------------------------------------------------------------
# The slow stream prints, every few seconds, one frame:
#   @apps <exit code of nvidia-smi>
#   <compute-apps CSV lines, or nvidia-smi's error>
#   @user <pid> <user>            (from one `ps`)
#   @cgroup <pid> <cgroup line>   (read from /proc/<pid>/cgroup by the shell, no process)
#   @end
APPS_BEGIN, APPS_END = "@apps", "@end"


@dataclass(frozen=True)
class AppsFrame:
    exit_code: int
    processes: tuple[ProcessSample, ...]
    error: str | None = None     # nvidia-smi's message when it failed
    me: str | None = None        # the user the stream runs as (its @me line), to tell other users' processes


def parse_apps_frame(lines: list[str]) -> AppsFrame:
    """One frame (the lines from '@apps N' up to, not including, '@end')."""
    head = lines[0].split() if lines else []
    code = _int(head[1]) if len(head) > 1 else None
    code = -1 if code is None else code
    csv_lines, users, cgroups = [], {}, {}
    me = None
    for line in lines[1:]:
        if line.startswith("@user "):
            parts = line.split(None, 2)
            if len(parts) == 3 and parts[1].isdigit():
                users[int(parts[1])] = parts[2].strip()
        elif line.startswith("@me "):
            me = line[4:].strip() or None
        elif line.startswith("@cgroup "):
            parts = line.split(None, 2)
            if len(parts) == 3 and parts[1].isdigit():
                cgroups.setdefault(int(parts[1]), []).append(parts[2])
        else:
            csv_lines.append(line)
    if code != 0:
        message = "\n".join(line for line in csv_lines if line.strip()) or f"exit code {code}"
        return AppsFrame(code, (), message, me)
    processes = tuple(
        ProcessSample(p.pid, p.name, p.used_mib, p.gpu_uuid, users.get(p.pid),
                      container_from_cgroup(cgroups.get(p.pid, ())))
        for p in parse_apps_csv("\n".join(csv_lines))
    )
    return AppsFrame(0, processes, None, me)


# --- history --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Gap:
    """A stretch without samples: the connection dropped or the stream stalled."""

    start: float
    end: float | None          # None while it lasts
    reason: str

    def duration(self, now: float) -> float:
        return (self.end if self.end is not None else now) - self.start

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class GpuHistory:
    """The last `maxlen` points of one GPU: samples, and Gap markers where samples are missing."""

    maxlen: int = 300
    points: deque = field(init=False)

    def __post_init__(self) -> None:
        self.points = deque(maxlen=self.maxlen)

    def add(self, sample: GpuSample) -> None:
        self.points.append(sample)

    def add_gap(self, gap: Gap) -> None:
        self.points.append(gap)

    def latest(self) -> GpuSample | None:
        for point in reversed(self.points):
            if isinstance(point, GpuSample):
                return point
        return None

    def series(self, metric: str, width: int | None = None) -> list[float | None]:
        """Values of one metric, oldest first; None at a gap (and for NA). The newest `width` points."""
        values = [p.metric(metric) if isinstance(p, GpuSample) else None for p in self.points]
        return values[-width:] if width else values


SPARK_BLOCKS = "▁▂▃▄▅▆▇█"
SPARK_GAP = "·"


def sparkline(values: list[float | None], lo: float = 0.0, hi: float | None = None) -> str:
    """Block characters scaled to [lo, hi]; a gap or NA shows as '·', so missing data is never drawn as 0."""
    known = [v for v in values if v is not None]
    top = hi if hi is not None else (max(known) if known else 1.0)
    span = (top - lo) or 1.0
    out = []
    for v in values:
        if v is None:
            out.append(SPARK_GAP)
        else:
            level = int((min(max(v, lo), top) - lo) / span * (len(SPARK_BLOCKS) - 1) + 0.5)
            out.append(SPARK_BLOCKS[level])
    return "".join(out)


__all__ = [
    "GPU_FIELDS", "APP_FIELDS", "FIELD_ALIASES", "THROTTLE_REASONS", "SLOWDOWN_REASONS", "NA_VALUES",
    "GpuSample", "ProcessSample", "AppsFrame", "Gap", "GpuHistory",
    "gpu_query_command", "apps_query_command", "invalid_field", "decode_throttle",
    "parse_gpu_line", "parse_gpu_csv", "parse_apps_csv", "parse_apps_frame", "container_from_cgroup",
    "sparkline", "APPS_BEGIN", "APPS_END", "SPARK_GAP",
]
