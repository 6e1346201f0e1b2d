"""GPU and GPU-process samples for `devenv monitor` (L0): parsing nvidia-smi's machine formats, decoding
clock-event (throttle) reasons, and a bounded per-GPU history that records gaps instead of hiding them.

A field nvidia-smi cannot read is None (NA) in a sample, never an exception. Timestamps are the laptop's
clock when a line arrived (epoch seconds): nvidia-smi's own clock may differ from ours.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections import deque
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

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


def apps_pids_script(indent: str = "", listing: str = "out", uuids: bool = False) -> str:
    """POSIX shell lines that set $pids to the pids (first CSV field) of the compute-apps listing held in
    $listing, space-separated, skipping error text; with uuids, also $uuids to the GPU uuids (last field) they
    run on, comma-separated, each once. Read with the shell's own `read` (nothing started)."""
    lines = ["pids= uuids=" if uuids else "pids=",
             "while IFS=, read -r pid rest; do",
             "  case $pid in ''|*[!0-9]*) continue ;; esac",
             '  pids="${pids:+$pids }$pid"']
    if uuids:
        lines += ["  u=${rest##*,}; u=${u# }",
                  '  case $u in GPU-*) case ",$uuids," in *",$u,"*) ;; *) uuids="${uuids:+$uuids,}$u" ;; esac ;; esac']
    lines.append("done <<DEVENV_EOF")
    # the here-document's body and end stay unindented
    return "\n".join(indent + line for line in lines) + f"\n${listing}\nDEVENV_EOF"


# compute-apps has no SM utilisation (tests/fixtures/pmon/load_bad_field.txt): `pmon` gives it per (GPU, pid).
# One sample (-c 1), utilisation only (-s u), for the GPUs named after -i (at most 4 per call: `pmon -h`).
PMON_MAX_GPUS = 4


def pmon_command(nvidia_smi: str = "nvidia-smi") -> str:
    return f"{nvidia_smi} pmon -c 1 -s u -i"


def pmon_batches_script(nvidia_smi: str, indent: str = "", line_prefix: str = "") -> str:
    """POSIX shell lines: for the GPUs in $uuids (comma-separated, apps_pids_script's), one pmon_command per
    PMON_MAX_GPUS of them, each printing "@pmon CODE" and then pmon's lines (each after line_prefix, if any)."""
    show = "printf '%s\\n' \"$pm\""
    if line_prefix:
        show += f' | while read -r l; do echo "{line_prefix}$l"; done'
    lines = ["set -f; IFS=,; set -- $uuids; unset IFS; set +f",
             "while [ $# -gt 0 ]; do",
             "  ids=$1; shift; n=1",
             f'  while [ $# -gt 0 ] && [ $n -lt {PMON_MAX_GPUS} ]; do ids="$ids,$1"; shift; n=$((n + 1)); done',
             f'  pm=$({pmon_command(nvidia_smi)} "$ids" 2>&1)',
             '  echo "@pmon $?"',
             f"  {show}",
             "done"]
    return "\n".join(indent + line for line in lines)


def parse_pmon(lines: Iterable[str], column: str = "sm") -> dict[tuple[int, int], int | None]:
    """`nvidia-smi pmon -s u` (or -s um) rows: (GPU index, pid) -> the column's %, None where the driver prints
    "-" (no utilisation sample in the interval: it does not say 0). column: "sm" (SM utilisation) or "mem"
    (memory bandwidth utilisation: the share of time the memory was read or written, the -s u group's second
    column; -s m's framebuffer MB is "fb"). A GPU without processes prints pid "-": no entry. The column is found
    by its header (`# gpu pid type sm mem ...`); a later row of the same pair wins."""
    at = {"sm": 3, "mem": 4}.get(column, 3)
    found: dict[tuple[int, int], int | None] = {}
    for line in lines:
        words = line.split()
        if not words:
            continue
        if words[0].startswith("#"):
            names = " ".join(words).lstrip("#").split()
            if "pid" in names and column in names:
                at = names.index(column)
            continue
        if len(words) <= at or not words[0].isdigit() or not words[1].isdigit():
            continue
        found[(int(words[0]), int(words[1]))] = _int(words[at]) if words[at] != "-" else None
    return found


def with_sm(processes: Iterable[ProcessSample], sm: dict[tuple[int, int], int | None],
            index_of: dict[str | None, int | None],
            membw: dict[tuple[int, int], int | None] | None = None) -> tuple[ProcessSample, ...]:
    """Processes with the SM % (and memory bandwidth %) pmon gave for their (GPU, pid); None where it gave "-"
    or nothing."""
    out = []
    for p in processes:
        index = index_of.get(p.gpu_uuid)
        if index is None:
            out.append(replace(p, sm_pct=None, membw_pct=None))
        else:
            out.append(replace(p, sm_pct=sm.get((index, p.pid)), membw_pct=(membw or {}).get((index, p.pid))))
    return tuple(out)


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

    def to_dict(self) -> dict[str, Any]:
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
    cpu_pct: float | None = None   # ps's %CPU: CPU time over the process's lifetime
    rss_kib: int | None = None
    runtime_s: int | None = None   # seconds since it started
    command: str | None = None     # the full command line (ps args)
    sm_pct: int | None = None      # SM utilisation from `nvidia-smi pmon` (None: "-", or pmon unavailable)
    membw_pct: int | None = None   # memory bandwidth utilisation from pmon's `mem` column (None as for sm_pct)

    def to_dict(self) -> dict[str, Any]:
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
#   @ps <pid> <user> <%cpu> <rss KiB> <elapsed s> <args...>   (from one `ps`; @user <pid> <user> from an old loop)
#   @cgroup <pid> <cgroup line>   (read from /proc/<pid>/cgroup by the shell, no process)
#   @pmon <exit code>, then @pm <line> per line of `nvidia-smi pmon -c 1 -s u -i <up to 4 GPUs>` (per 4 GPUs)
#   @end
APPS_BEGIN, APPS_END = "@apps", "@end"


@dataclass(frozen=True)
class HostStats:
    """The host line: load, CPUs, memory, swap, the disk that holds the workspaces; any field may be None (NA).
    cpu_pct needs two readings of /proc/stat: a one-shot frame reads it twice (at its start and its end), a
    streamed frame once, and the sampler fills cpu_pct in from two frames."""

    load1: float | None = None
    ncpu: int | None = None
    mem_total_kib: int | None = None
    mem_available_kib: int | None = None
    swap_total_kib: int | None = None
    swap_free_kib: int | None = None
    disk_total_kib: int | None = None
    disk_used_kib: int | None = None
    disk_mount: str | None = None
    cpu_jiffies: tuple[int, ...] = ()
    cpu_pct: float | None = None

    @property
    def mem_used_kib(self) -> int | None:
        """Used as free(1) and nvitop count it: total less what is available (page cache is available)."""
        if self.mem_total_kib is None or self.mem_available_kib is None:
            return None
        return max(0, self.mem_total_kib - self.mem_available_kib)

    @property
    def swap_used_kib(self) -> int | None:
        if self.swap_total_kib is None or self.swap_free_kib is None:
            return None
        return max(0, self.swap_total_kib - self.swap_free_kib)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("cpu_jiffies")
        data["mem_used_kib"], data["swap_used_kib"] = self.mem_used_kib, self.swap_used_kib
        return data


def cpu_busy_pct(before: tuple[int, ...], after: tuple[int, ...]) -> float | None:
    """Busy share of /proc/stat's cpu jiffies between two readings (idle + iowait count as idle)."""
    if len(before) < 5 or len(after) != len(before):
        return None
    total = sum(after) - sum(before)
    idle = (after[3] + after[4]) - (before[3] + before[4])
    return None if total <= 0 else max(0.0, min(100.0, 100.0 * (total - idle) / total))


@dataclass(frozen=True)
class AppsFrame:
    exit_code: int
    processes: tuple[ProcessSample, ...]
    error: str | None = None     # nvidia-smi's message when it failed
    me: str | None = None        # the user the stream runs as (its @me line), to tell other users' processes
    host: HostStats | None = None
    sm: dict[tuple[int, int], int | None] = field(default_factory=dict)  # pmon's (GPU index, pid) -> SM %
    membw: dict[tuple[int, int], int | None] = field(default_factory=dict)  # pmon's (GPU index, pid) -> mem %
    sm_error: str | None = None  # why pmon gave nothing (its message), when it failed


def parse_apps_frame(lines: list[str]) -> AppsFrame:
    """One frame (the lines from '@apps N' up to, not including, '@end')."""
    head = lines[0].split() if lines else []
    code = _int(head[1]) if len(head) > 1 else None
    code = -1 if code is None else code
    csv_lines: list[str] = []
    users: dict[int, str] = {}
    cgroups: dict[int, list[str]] = {}
    details: dict[int, tuple[float | None, int | None, int | None, str | None]] = {}  # ps: cpu, rss, runtime, args
    me = None
    stats: dict[str, Any] = {}  # HostStats' fields, as the lines give them
    pmon_lines: list[str] = []
    pmon_failed: list[str] = []   # what a pmon that exited non-zero printed
    pmon_code = 0
    pmon_codes: list[int] = []
    for line in lines[1:]:
        if line.startswith("@pmon "):
            parsed = _int(line[6:])
            pmon_code = parsed if parsed is not None else -1
            pmon_codes.append(pmon_code)
        elif line.startswith("@pm ") or line == "@pm":
            (pmon_failed if pmon_code else pmon_lines).append(line[4:])
        elif line.startswith(("@load ", "@mem ", "@cpu ", "@disk ")):
            _host_line(line, stats)
        elif line.startswith("@ps "):
            parts = line.split(None, 6)
            if len(parts) >= 6 and parts[1].isdigit():
                pid = int(parts[1])
                users[pid] = parts[2]
                details[pid] = (_float(parts[3]), _int(parts[4]), _int(parts[5]),
                                parts[6].strip() if len(parts) == 7 else None)
        elif line.startswith("@user "):
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
    host = HostStats(**stats) if stats else None
    if code != 0:
        message = "\n".join(line for line in csv_lines if line.strip()) or f"exit code {code}"
        return AppsFrame(code, (), message, me, host)
    processes = tuple(
        ProcessSample(p.pid, p.name, p.used_mib, p.gpu_uuid, users.get(p.pid),
                      container_from_cgroup(cgroups.get(p.pid, ())), *details.get(p.pid, ()))
        for p in parse_apps_csv("\n".join(csv_lines))
    )
    sm_error = None
    if any(pmon_codes):
        sm_error = next((m for m in (line.strip() for line in pmon_failed) if m),
                        f"nvidia-smi pmon exited {next(c for c in pmon_codes if c)}")
    return AppsFrame(0, processes, None, me, host, sm=parse_pmon(pmon_lines), sm_error=sm_error,
                     membw=parse_pmon(pmon_lines, "mem"))


def _host_line(line: str, stats: dict[str, Any]) -> None:
    head, *words = line.split()
    if head == "@load" and words:
        stats["load1"] = _float(words[0])
        if len(words) > 3:
            stats["ncpu"] = _int(words[3])
    elif head == "@mem" and len(words) >= 2:
        key = {"MemTotal:": "mem_total_kib", "MemAvailable:": "mem_available_kib",
               "SwapTotal:": "swap_total_kib", "SwapFree:": "swap_free_kib"}.get(words[0])
        if key:
            stats[key] = _int(words[1])
    elif head == "@cpu":
        jiffies = tuple(j for j in (_int(w) for w in words) if j is not None)
        if "cpu_jiffies" in stats:  # a second reading in the same frame (a one-shot look): the busy share between
            stats["cpu_pct"] = cpu_busy_pct(stats["cpu_jiffies"], jiffies)
        stats["cpu_jiffies"] = jiffies
    elif head == "@disk" and len(words) >= 4:
        stats["disk_total_kib"], stats["disk_used_kib"] = _int(words[0]), _int(words[1])
        stats["disk_mount"] = " ".join(words[3:])


# --- history --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Gap:
    """A stretch without samples: the connection dropped or the stream stalled."""

    start: float
    end: float | None          # None while it lasts
    reason: str

    def duration(self, now: float) -> float:
        return (self.end if self.end is not None else now) - self.start

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


Point = GpuSample | Gap  # one entry of a GPU's history


@dataclass
class GpuHistory:
    """The last `maxlen` points of one GPU: samples, and Gap markers where samples are missing."""

    maxlen: int = 300
    points: deque[Point] = field(init=False)

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

    def series(self, metric: str, width: int, now: float | None = None, step: float | None = None,
               ) -> list[float | None]:
        """The metric on a time axis: `width` cells of `step` seconds, the last one ending at `now`."""
        return time_series(tuple(self.points), metric, width, now, step)


def sample_step(points: tuple[Point, ...]) -> float:
    """The usual time between samples (the median spacing; 1 s when there are too few to tell)."""
    times = [p.t for p in points if isinstance(p, GpuSample)]
    diffs = sorted(b - a for a, b in zip(times, times[1:]) if b > a)
    return min(60.0, max(0.1, diffs[len(diffs) // 2])) if diffs else 1.0


def time_series(points: tuple[Point, ...], metric: str, width: int, now: float | None = None, step: float | None = None,
                ) -> list[float | None]:
    """Values of one metric in `width` cells of `step` seconds each, oldest first, the last ending at `now`
    (default: the newest sample). A cell holds the mean of its samples; an empty cell between two samples no
    further apart than 2.5 steps carries the one before (sampling jitter), anything longer is a gap (None),
    as is a cell inside a recorded Gap. So a 31 s gap is 31 cells wide, not one dot."""
    if width <= 0:
        return []
    samples = [p for p in points if isinstance(p, GpuSample)]
    gaps = [p for p in points if isinstance(p, Gap)]
    if not samples:
        return [None] * width
    step = step or sample_step(points)
    end = now if now is not None else samples[-1].t + step / 2
    start = end - width * step
    cells: list[list[float]] = [[] for _ in range(width)]
    seen = [False] * width
    for sample in samples:
        i = int((sample.t - start) // step)
        if 0 <= i < width:
            seen[i] = True
            value = sample.metric(metric)
            if value is not None:
                cells[i].append(value)
    times = [p.t for p in samples]
    out: list[float | None] = []
    previous: float | None = None
    j = bisect_left(times, start)  # samples before the window, for the first cells' carry
    before = samples[j - 1] if j else None
    previous = before.metric(metric) if before is not None else None
    for i in range(width):
        lo, hi = start + i * step, start + (i + 1) * step
        if seen[i]:
            value = sum(cells[i]) / len(cells[i]) if cells[i] else None
        else:
            k = bisect_left(times, lo)
            prev_t = times[k - 1] if k else None
            next_t = times[k] if k < len(times) else None
            held = prev_t is not None and (next_t if next_t is not None else end) - prev_t <= 2.5 * step
            value = previous if held else None
        if any(g.start < hi and (g.end if g.end is not None else end) > lo for g in gaps) and not seen[i]:
            value = None
        out.append(value)
        previous = value if (seen[i] or value is not None) else None
    return out


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
    "GpuSample", "ProcessSample", "AppsFrame", "HostStats", "cpu_busy_pct", "Gap", "GpuHistory",
    "gpu_query_command", "apps_query_command", "apps_pids_script", "invalid_field", "decode_throttle",
    "parse_gpu_line", "parse_gpu_csv", "parse_apps_csv", "parse_apps_frame", "container_from_cgroup",
    "pmon_command", "pmon_batches_script", "parse_pmon", "with_sm", "PMON_MAX_GPUS",
    "sparkline", "time_series", "sample_step", "APPS_BEGIN", "APPS_END", "SPARK_GAP",
]
