"""How one host looks in the monitor: rich renderables built from a HostSnapshot (pure, no app state)."""

from __future__ import annotations

import io
from dataclasses import dataclass

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from devenv.env import spec as envspec
from devenv.gpu import format as fmt
from devenv.gpu.occupancy import whose
from devenv.gpu.sample import GpuSample, sparkline
from devenv.services.monitor import HostSnapshot

STATE_STYLE = {
    "ok": ("●", "green"), "connecting": ("◌", "cyan"), "reconnecting": ("◐", "yellow"),
    "error": ("✖", "red"), "no-gpu": ("○", "magenta"), "stopped": ("■", "bright_black"),
}
# Width of everything in a GPU row but the two histories (columns + padding), to size the histories.
FIXED_ROW_WIDTH = 96


@dataclass(frozen=True)
class HostExtras:
    """What other services know about a host: its environment and its last sanity verdict."""

    env_state: str | None = None
    verdict: str | None = None


def _level_style(value: float | None, warn: float, bad: float) -> str:
    if value is None:
        return "bright_black"
    return "red" if value >= bad else "yellow" if value >= warn else "green"


def header(snap: HostSnapshot, extras: HostExtras, now: float) -> Text:
    mark, color = STATE_STYLE.get(snap.state, ("?", "white"))
    text = Text.assemble((f"{mark} ", color), (snap.host, "bold"), "  ", (snap.state, color))
    names = {g.name for g in snap.gpus if g.name}
    if snap.gpus:
        text.append(f"  {len(snap.gpus)}× {', '.join(sorted(names)) or 'GPU'}")
    if snap.driver_version:
        text.append(f"  driver {snap.driver_version}", "bright_black")
    text.append("  env: ")
    text.append(extras.env_state or "unknown", "cyan" if extras.env_state == "running" else "bright_black")
    text.append("  sanity: ")
    verdict = extras.verdict or "none yet"
    text.append(verdict, "green" if verdict.startswith("PASS") else "red" if verdict.startswith("FAIL")
                else "yellow" if verdict.startswith("WARN") else "bright_black")
    if snap.last_sample_t is not None:
        stale = now - snap.last_sample_t > 3
        text.append(f"  sample {fmt.age(snap.last_sample_t, now)}", "yellow" if stale else "bright_black")
    if snap.reconnects:
        text.append(f"  reconnects {snap.reconnects}", "bright_black")
    return text


def status_lines(snap: HostSnapshot, now: float) -> list[Text]:
    lines = []
    if snap.message and snap.state != "ok":
        color = STATE_STYLE.get(snap.state, ("", "white"))[1]
        line = Text(f"  {snap.message}", color)
        if snap.hint:
            line.append(f"  ({snap.hint})", "bright_black")
        lines.append(line)
    for gap in snap.gaps[-2:]:
        end = fmt.clock_time(gap.end) if gap.end is not None else "now"
        line = Text(f"  gap {fmt.clock_time(gap.start)} → {end} ({fmt.duration(gap.duration(now))}) ", "yellow")
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
        text.append(reason, "red" if bad else "yellow" if reason in gpu.slowed_by else "bright_black")
    return text


def history_points(width: int) -> int:
    """Points per history sparkline that fit a panel `width` cells wide (between 6 and 60)."""
    return max(6, min(60, (width - FIXED_ROW_WIDTH) // 2))


def gpu_table(snap: HostSnapshot, points_shown: int = 24) -> Table:
    table = Table(box=None, padding=(0, 1), expand=False, show_edge=False, header_style="bold bright_black")
    for name, justify in (("GPU", "right"), ("Util", "right"), ("Memory", "right"), ("Temp", "right"),
                          ("Power", "right"), ("SM clock", "right"), ("Throttle", "left"), ("ECC", "right"),
                          ("Util history", "left"), ("Mem history", "left")):
        table.add_column(name, justify=justify, no_wrap=name != "Throttle")
    for gpu in snap.gpus:
        points = snap.history.get(gpu.index if gpu.index is not None else -1, ())
        util_hist = [p.metric("util") if isinstance(p, GpuSample) else None for p in points][-points_shown:]
        mem_hist = [p.metric("mem") if isinstance(p, GpuSample) else None for p in points][-points_shown:]
        power_pct = (100 * gpu.power_w / gpu.power_limit_w) if gpu.power_w is not None and gpu.power_limit_w else None
        ecc = gpu.ecc_uncorrected
        table.add_row(
            fmt.num(gpu.index),
            Text(fmt.num(gpu.util_pct, unit=" %"), _level_style(gpu.util_pct, 101, 101)),
            Text(fmt.mem(gpu), _level_style(gpu.mem_pct, 85, 95)),
            Text(fmt.num(gpu.temp_c, unit=" °C"), _level_style(gpu.temp_c, 80, 87)),
            Text(fmt.power(gpu), _level_style(power_pct, 90, 98)),
            fmt.clock(gpu),
            throttle_text(gpu),
            Text(fmt.num(ecc), "red" if ecc else "bright_black"),
            Text(sparkline(util_hist, 0, 100).rjust(points_shown), "green"),
            Text(sparkline(mem_hist, 0, 100).rjust(points_shown), "cyan"),
        )
    return table


def process_table(snap: HostSnapshot, now: float) -> RenderableType:
    if snap.processes_error and not snap.processes:
        return Text(f"  processes: {snap.processes_error}", "bright_black")
    if not snap.processes:
        return Text("  no GPU processes" if snap.processes_t is not None else "  processes: waiting for the first list",
                    "bright_black")
    index_of = {g.uuid: g.index for g in snap.gpus}
    table = Table(box=None, padding=(0, 1), show_edge=False, header_style="bold bright_black")
    # processes come from the slower stream: say how old the list is, next to the (fresher) GPU rows
    listed = f"Process (listed {fmt.age(snap.processes_t, now)})" if snap.processes_t is not None else "Process"
    for name, justify in (("GPU", "right"), ("PID", "right"), ("User", "left"), ("Container", "left"),
                          ("Memory", "right"), (listed, "left")):
        table.add_column(name, justify=justify, no_wrap=True)
    owner = envspec.owner()
    for p in sorted(snap.processes, key=lambda p: (index_of.get(p.gpu_uuid, 99), p.pid)):
        mark = whose(p, snap.login_user, owner)  # another user's or another environment's: shares the GPU
        name = Text(p.name or fmt.NA)
        if mark:
            name.append(f"  ({mark})", "yellow")
        table.add_row(fmt.num(index_of.get(p.gpu_uuid)), str(p.pid), p.user or fmt.NA, p.container or fmt.NA,
                      fmt.mib(p.used_mib), name)
    return table


def host_view(snap: HostSnapshot, extras: HostExtras, now: float, width: int = 120) -> RenderableType:
    parts: list[RenderableType] = [header(snap, extras, now), *status_lines(snap, now)]
    if snap.gpus:
        parts += [gpu_table(snap, history_points(width)), process_table(snap, now)]
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
