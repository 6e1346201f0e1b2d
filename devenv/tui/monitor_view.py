"""How one host looks in the monitor: rich renderables built from a HostSnapshot (pure, no app state)."""

from __future__ import annotations

import io
from dataclasses import dataclass

from rich.console import Console, Group, JustifyMethod, RenderableType
from rich.table import Table
from rich.text import Text

from devenv.env import spec as envspec
from devenv.gpu import format as fmt
from devenv.gpu.occupancy import whose
from devenv.gpu.sample import GpuSample, Point, ProcessSample, sample_step, sparkline, time_series
from devenv.services.monitor import HostSnapshot

STATE_STYLE = {
    "ok": ("●", "green"), "connecting": ("◌", "cyan"), "reconnecting": ("◐", "yellow"),
    "error": ("✖", "red"), "no-gpu": ("○", "magenta"), "stopped": ("■", "bright_black"),
    "no-job": ("○", "bright_black"), "job-ended": ("■", "bright_black"), "job-pending": ("◔", "yellow"),
}


@dataclass(frozen=True)
class HostExtras:
    """What other services know about a host: its environment and its last sanity verdict."""

    env_state: str | None = None
    verdict: str | None = None


# Load colours as nvitop uses them (its defaults: GPU util 10/75 %, memory 10/80 %): light, moderate, heavy.
# Temperature and power get their own limits. Health (throttling by heat or hardware, ECC errors, gaps) is
# drawn reversed, so a problem never reads as "busy".
LOAD_COLORS = ("green", "yellow", "red")
HEALTH_BAD = "bold white on red"
HEALTH_WARN = "bold black on yellow"
STALE = "bright_black"


def _level_style(value: float | None, moderate: float, heavy: float) -> str:
    if value is None:
        return "bright_black"
    return LOAD_COLORS[2] if value >= heavy else LOAD_COLORS[1] if value >= moderate else LOAD_COLORS[0]


def header(snap: HostSnapshot, extras: HostExtras, now: float, width: int = 200) -> Text:
    """The host's line: state first, then what fits `width` (staleness before details like the driver)."""
    mark, color = STATE_STYLE.get(snap.state, ("?", "white"))
    text = Text.assemble((f"{mark} ", color), (snap.host, "bold"), "  ", (snap.state, color))
    pieces: list[Text] = []  # in the order they are given up when the line is too long: last first
    if snap.last_sample_t is not None:
        if is_stale(snap):
            pieces.append(Text(f"  last seen {fmt.age(snap.last_sample_t, now)}", HEALTH_WARN))
        else:
            late = now - snap.last_sample_t > 3
            pieces.append(Text(f"  sample {fmt.age(snap.last_sample_t, now)}", "yellow" if late else "bright_black"))
    names = {g.name for g in snap.gpus if g.name}
    if snap.gpus:
        pieces.append(Text(f"  {len(snap.gpus)}× {', '.join(sorted(names)) or 'GPU'}"))
    env = Text("  env: ")
    env.append(extras.env_state or "unknown", "cyan" if (extras.env_state or "").startswith("running")
               else "bright_black")
    pieces.append(env)
    verdict = extras.verdict or "none yet"
    sanity = Text("  sanity: ")
    sanity.append(verdict, "green" if verdict.startswith("PASS") else "red" if verdict.startswith("FAIL")
                  else "yellow" if verdict.startswith("WARN") else "bright_black")
    pieces.append(sanity)
    if snap.driver_version:
        pieces.append(Text(f"  driver {snap.driver_version}", "bright_black"))
    if snap.reconnects:
        pieces.append(Text(f"  reconnects {snap.reconnects}", "bright_black"))
    for piece in pieces:
        if text.cell_len + piece.cell_len <= width:
            text.append_text(piece)
    return text


def status_lines(snap: HostSnapshot, now: float) -> list[Text]:
    lines = []
    if snap.job is not None:  # a node of a Slurm job: which job (its nodes' panels follow one another)
        lines.append(Text(f"  {snap.job.describe()}", "cyan", no_wrap=True, overflow="ellipsis"))
    if snap.message and snap.state != "ok":
        color = STATE_STYLE.get(snap.state, ("", "white"))[1]
        # the message and its hint (the remedy: "install the NVIDIA driver, ...") wrap, never cut
        line = Text(f"  {snap.message}", color, overflow="fold")
        if snap.hint:
            line.append(f"  ({snap.hint})", "bright_black")
        lines.append(line)
    for gap in snap.gaps[-2:]:
        end = fmt.clock_time(gap.end) if gap.end is not None else "now"
        line = Text(f"  gap {fmt.clock_time(gap.start)} → {end} ({fmt.duration(gap.duration(now))}) ", "yellow",
                    no_wrap=True, overflow="ellipsis")
        line.append(gap.reason, "bright_black")
        lines.append(line)
    if snap.fields_missing:
        lines.append(Text(f"  not reported by this driver: {', '.join(snap.fields_missing)}", "bright_black"))
    return lines


def throttle_text(gpu: GpuSample) -> Text:
    reasons = gpu.throttle_reasons
    if reasons is None:
        return Text(fmt.NA, "bright_black")
    if not reasons:
        return Text("none", "bright_black")
    text = Text()
    for i, reason in enumerate(reasons):
        if i:
            text.append(", ")
        bad = reason in ("hw slowdown", "hw thermal", "hw power brake", "sw thermal")
        text.append(reason, HEALTH_BAD if bad else "yellow" if reason in gpu.slowed_by else "bright_black")
    return text


def is_stale(snap: HostSnapshot) -> bool:
    """Values that are not live: the host is down or reconnecting, and what is shown is its last sample."""
    return snap.state != "ok" and bool(snap.gpus)


@dataclass(frozen=True)
class Column:
    name: str
    width: int
    drop_rank: int      # 0: never dropped; higher ranks go first when the panel is narrow
    justify: JustifyMethod = "right"


GAP = 2  # cells between columns


def _columns(compact: bool, throttle_width: int) -> list[Column]:
    mem, power, temp = (10, 8, 4) if compact else (19, 11, 5)
    return [
        Column("GPU", 3, 0), Column("Util", 5, 0), Column("Memory", mem, 0), Column("Power", power, 0),
        Column("Temp", temp, 0), Column("ECC", 3, 1), Column("Throttle", throttle_width, 2, "left"),
        Column("SM clock", 15, 3), Column("Util history", 0, 4, "left"), Column("Mem history", 0, 5, "left"),
    ]


def gpu_layout(width: int, throttle_width: int = 12) -> tuple[list[Column], int, bool]:
    """(the columns that fit `width` cells, the width of each history, compact or not). GPU, Util, Memory,
    Power and Temp always stay (in compact formats if need be); histories go first, then clocks, throttle, ECC."""
    for compact in (False, True):
        columns = _columns(compact, throttle_width)
        for rank in (5, 4, 3, 2, 1, 0):
            kept = [c for c in columns if c.drop_rank <= rank]
            n_hist = sum(1 for c in kept if not c.width)  # histories take what the fixed columns leave
            used = sum(c.width for c in kept) + GAP * (len(kept) - 1)
            hist = (width - used) // n_hist if n_hist else 0
            if used <= width and (not n_hist or hist >= 10):
                return kept, min(hist, 90), compact
        if compact:
            return [c for c in columns if not c.drop_rank], 0, True
    raise AssertionError("unreachable")


def _history_cell(points: tuple[Point, ...], metric: str, cells: int, now: float, step: float, style: str) -> Text:
    """The metric on a time axis ending now; cells from before the first sample stay blank (no history yet is
    not a gap), so only real gaps show as dots."""
    drawn = sparkline(time_series(points, metric, cells, now, step), 0, 100)
    first = next((p.t for p in points if isinstance(p, GpuSample)), now)
    blank = max(0, min(cells, int((first - (now - cells * step)) // step)))
    return Text(" " * blank + drawn[blank:], style)


def gpu_table(snap: HostSnapshot, width: int = 120, now: float | None = None) -> Table:
    """One row per GPU, with the columns that fit `width` (see gpu_layout)."""
    now = snap.t if now is None else now
    stale = is_stale(snap)
    throttle_width = max((len(fmt.throttle(g)) for g in snap.gpus), default=4)
    columns, hist, compact = gpu_layout(width, max(8, min(throttle_width, 26)))
    table = Table(box=None, padding=(0, GAP // 2), pad_edge=False, expand=False, show_edge=False,
                  header_style="bold bright_black")
    for c in columns:
        table.add_column(c.name if c.width or hist >= len(c.name) else c.name.split()[0], justify=c.justify,
                         width=c.width or hist, no_wrap=True, overflow="ellipsis")
    steps = [sample_step(snap.history.get(g.index if g.index is not None else -1, ())) for g in snap.gpus]
    for gpu, step in zip(snap.gpus, steps):
        points = snap.history.get(gpu.index if gpu.index is not None else -1, ())
        power_pct = (100 * gpu.power_w / gpu.power_limit_w) if gpu.power_w is not None and gpu.power_limit_w else None
        ecc = gpu.ecc_uncorrected
        cells = {
            "GPU": Text(fmt.num(gpu.index)),
            "Util": Text(fmt.num(gpu.util_pct, unit=" %" if not compact else "%"),
                         _level_style(gpu.util_pct, 10, 75)),
            "Memory": Text(fmt.mem_short(gpu) if compact else fmt.mem(gpu), _level_style(gpu.mem_pct, 10, 80)),
            "Power": Text(fmt.power_short(gpu) if compact else fmt.power(gpu), _level_style(power_pct, 80, 95)),
            "Temp": Text(fmt.num(gpu.temp_c, unit="C" if compact else " °C"), _level_style(gpu.temp_c, 75, 85)),
            "ECC": Text(fmt.num(ecc), HEALTH_BAD if ecc else "bright_black"),
            "Throttle": throttle_text(gpu),
            "SM clock": Text(fmt.clock(gpu)),
            "Util history": _history_cell(points, "util", hist, now, step, "green"),
            "Mem history": _history_cell(points, "mem", hist, now, step, "cyan"),
        }
        row = [cells[c.name] for c in columns]
        if stale:  # last values of a host that is down: dimmed, never in live colours
            row = [Text(cell.plain, STALE) for cell in row]
        table.add_row(*row)
    return table


SORTS = ("gpu", "memory", "sm", "cpu", "time")  # the `o` key cycles through these


def sorted_processes(snap: HostSnapshot, sort: str = "gpu") -> list[ProcessSample]:
    index_of = {g.uuid: g.index for g in snap.gpus}
    by_gpu = sorted(snap.processes, key=lambda p: (index_of.get(p.gpu_uuid, 99), p.pid))
    # highest first; an unknown value ("-": no sample, or not reported) after every known one, 0 included
    keys = {"memory": lambda p: -(p.used_mib if p.used_mib is not None else -1),
            "sm": lambda p: -(p.sm_pct if p.sm_pct is not None else -1),
            "cpu": lambda p: -(p.cpu_pct if p.cpu_pct is not None else -1.0),
            "time": lambda p: -(p.runtime_s if p.runtime_s is not None else -1)}
    return sorted(by_gpu, key=keys[sort]) if sort in keys else by_gpu


def _runtime(seconds: int | None) -> str:
    if seconds is None:
        return fmt.NA
    if seconds >= 86400:
        return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def _rss(kib: int | None) -> str:
    return fmt.NA if kib is None else fmt.mib(kib // 1024)


def process_table(snap: HostSnapshot, now: float, width: int = 120, sort: str = "gpu",
                  selected: int | None = None) -> RenderableType:
    """The host's GPU processes, sorted; `selected` (a pid) is highlighted and its full command shown below."""
    if snap.processes_error and not snap.processes:
        return Text(f"  processes: {snap.processes_error}", "bright_black")
    if not snap.processes:
        return Text("  no GPU processes" if snap.processes_t is not None else "  processes: waiting for the first list",
                    "bright_black")
    index_of = {g.uuid: g.index for g in snap.gpus}
    rows = sorted_processes(snap, sort)
    # processes come from the slower stream: say how old the list is, next to the (fresher) GPU rows
    listed = f"Command (listed {fmt.age(snap.processes_t, now)})" if snap.processes_t is not None else "Command"
    arrow = {"memory": "Memory", "sm": "SM%", "cpu": "CPU%", "time": "Time"}.get(sort)
    columns = [("GPU", 3), ("PID", max(3, *(len(str(p.pid)) for p in rows))),
               ("User", max(4, *(len(p.user or fmt.NA) for p in rows))),
               ("Container", max(9, *(len(p.container or fmt.NA) for p in rows))), ("Memory", 6),
               ("SM%", 4), ("MemBW%", 6), ("CPU%", 5), ("RSS", 6), ("Time", 8)]
    # a narrow panel keeps the command readable; pmon's SM% and MemBW% (memory bandwidth) go last
    for drop in ("Container", "Time", "RSS", "User", "CPU%", "MemBW%", "SM%"):
        if sum(w for _, w in columns) + GAP * len(columns) + 16 > width and drop != arrow:
            columns = [c for c in columns if c[0] != drop]
    command_width = max(8, width - sum(w for _, w in columns) - GAP * len(columns))
    table = Table(box=None, padding=(0, GAP // 2), pad_edge=False, show_edge=False, header_style="bold bright_black")
    for name, w in columns:
        title = f"{name}▼" if name == arrow else name
        table.add_column(title, justify="left" if name in ("User", "Container") else "right",
                         width=max(w, len(title)), no_wrap=True, overflow="ellipsis")
    table.add_column(listed if len(listed) <= command_width else "Command", width=command_width, no_wrap=True,
                     overflow="ellipsis")
    style = STALE if is_stale(snap) else ""
    chosen = None
    owner = envspec.owner()
    for p in rows:
        values = {"GPU": fmt.num(index_of.get(p.gpu_uuid)), "PID": str(p.pid), "User": p.user or fmt.NA,
                  "Container": p.container or fmt.NA, "Memory": fmt.mib(p.used_mib),
                  "SM%": fmt.num(p.sm_pct), "MemBW%": fmt.num(p.membw_pct), "CPU%": fmt.num(p.cpu_pct, "{:.0f}"),
                  "RSS": _rss(p.rss_kib),
                  "Time": _runtime(p.runtime_s)}
        row_style = "reverse" if p.pid == selected else style
        chosen = p if p.pid == selected else chosen
        command = Text(p.command or p.name or fmt.NA, style)
        mark = whose(p, snap.login_user, owner)  # another user's or another environment's: shares the GPU
        if mark:
            command = Text.assemble((f"({mark}) ", style or "yellow"), command)
        table.add_row(*(Text(values[name], style) for name, _ in columns), command, style=row_style)
    parts: list[RenderableType] = [table]
    if snap.sm_error and any(name == "SM%" for name, _ in columns):  # say why the columns are all "-"
        parts.append(Text(f"  SM% and MemBW% {fmt.NA}: nvidia-smi pmon: {snap.sm_error.splitlines()[0]}",
                          "bright_black", no_wrap=True, overflow="ellipsis"))
    if chosen is None:
        return parts[0] if len(parts) == 1 else Group(*parts)
    detail = Text(f"  pid {chosen.pid} · {chosen.user or fmt.NA}"
                  + (f" · {chosen.container}" if chosen.container else "") + " · ", "bold")
    detail.append(chosen.command or chosen.name or fmt.NA, "cyan")
    detail.overflow = "fold"
    return Group(*parts, detail)


def host_line(snap: HostSnapshot, width: int = 200) -> Text | None:
    """CPU, load, RAM, swap and the disk that holds the workspaces, nvitop-style, coloured by the same levels
    (also for a host without a GPU); the parts are format.host_parts, as `monitor --once` prints them. A part that
    does not fit `width` is left out whole (the disk first, then swap...), never cut in the middle of a number."""
    h = snap.host_stats
    if h is None:
        return None
    style = STALE if is_stale(snap) else None
    levels = {"CPU": (10, 75), "RAM": (10, 80), "swap": (10, 50)}
    text = Text("  ")
    for i, (label, value, pct) in enumerate(fmt.host_parts(h)):
        part = Text(("  " if i else "") + label + " ", "bright_black")
        moderate, heavy = levels.get(label, (80, 95))  # the disk: only a nearly full one is a warning
        part.append(value, style or ("" if label == "load" else _level_style(pct, moderate, heavy)
                                     if pct is not None or value == fmt.NA else "bright_black"))
        if i and text.cell_len + part.cell_len > width:  # CPU stays (cut by the panel if it must)
            break
        text.append_text(part)
    text.no_wrap, text.overflow = True, "ellipsis"
    return text


def host_view(snap: HostSnapshot, extras: HostExtras, now: float, width: int = 120, sort: str = "gpu",
              selected: int | None = None) -> RenderableType:
    parts: list[RenderableType] = [header(snap, extras, now, width), *status_lines(snap, now)]
    line = host_line(snap, width)
    if line is not None:
        parts.append(line)
    if snap.gpus:
        parts += [gpu_table(snap, width, now), process_table(snap, now, width, sort, selected)]
    return Group(*parts)


_CONSOLE = Console(file=io.StringIO(), force_terminal=True, color_system="truecolor", legacy_windows=False)


def flatten(renderable: RenderableType, width: int) -> Text:
    """The renderable laid out once at `width`, as styled Text: cheap for the screen to draw again and again
    (rich tables otherwise get measured each time a line of the screen is drawn)."""
    lines = _CONSOLE.render_lines(renderable, _CONSOLE.options.update_width(max(width, 20)), pad=False)
    text = Text(no_wrap=True, overflow="crop", end="")
    for i, line in enumerate(lines):
        if i:
            text.append("\n")
        for segment in line:
            if not segment.control:
                text.append(segment.text, segment.style)
    return text
