"""Autostop settings (L0): `autostop: 90m` in an env or host profile, `up --autostop 90m`, checked once here.

A setting is the idle window, what happens at its end (stop: the environment is stopped and its workspace kept,
the next `up` brings it back; down: removed, workspace kept), an optional hook run first (e.g. save a
checkpoint), the GPU threshold under which a GPU is idle, and how often the watcher samples.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from devenv.errors import DevenvError

MIN_INTERVAL_S = 1.0
MAX_INTERVAL_S = 30.0
MAX_WINDOW_S = 7 * 24 * 3600.0      # a week: longer is no autostop at all, and likely a typo
ACTIONS = ("stop", "down")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class AutostopError(DevenvError):
    """A bad autostop value: bad input (exit 2), with the form it takes."""

    exit_code = 2


@dataclass(frozen=True)
class Autostop:
    idle_s: float
    action: str = "stop"
    hook: str | None = None
    gpu_threshold: float = 5.0
    interval_s: float | None = None    # None: the default for the window (default_interval)

    @property
    def sample_s(self) -> float:
        return self.interval_s if self.interval_s is not None else default_interval(self.idle_s)

    def to_dict(self) -> dict[str, object]:
        return {"idle_s": self.idle_s, "action": self.action, "hook": self.hook,
                "gpu_threshold": self.gpu_threshold, "interval_s": self.sample_s}


def default_interval(window_s: float) -> float:
    """A tenth of the window, between 1 s and 30 s: a 90 m window is sampled every 30 s (cheap), a test's 5 s
    window every second."""
    return min(MAX_INTERVAL_S, max(MIN_INTERVAL_S, window_s / 10))


def parse_duration(text: str, what: str = "autostop") -> float:
    """Seconds of '90m', '1h30m', '45s', '2h', '1d' (a bare number is minutes, as SkyPilot's -i takes it)."""
    raw = str(text).strip().lower()
    if re.fullmatch(r"\d{1,6}(\.\d{1,3})?", raw):
        return float(raw) * 60
    parts = re.findall(r"(\d{1,6}(?:\.\d{1,3})?)\s*([smhd])", raw)
    if not parts or re.sub(r"\s+", "", raw) != "".join(n + u for n, u in parts):
        shown = raw if len(raw) <= 20 else raw[:17] + "..."
        raise AutostopError(f"{what}: {shown!r} is not a duration",
                            "write it like 90m, 1h30m, 45s or 2h (a bare number is minutes)")
    return sum(float(n) * _UNITS[u] for n, u in parts)


def validate(setting: Autostop, what: str = "autostop") -> Autostop:
    """The setting, or AutostopError naming what is absurd and what to write instead."""
    if setting.action not in ACTIONS:
        raise AutostopError(f"{what}: action {setting.action!r} is not one of {', '.join(ACTIONS)}",
                            "stop keeps the environment to start again with `devenv up`; down removes it "
                            "(the workspace is kept either way)")
    if setting.interval_s is not None and not MIN_INTERVAL_S <= setting.interval_s <= 600:
        raise AutostopError(f"{what}: sampling every {setting.interval_s:g} s is outside 1 s to 10 m",
                            "leave `sample` out for the default (a tenth of the window, at most 30 s)")
    if setting.idle_s < setting.sample_s:
        raise AutostopError(f"{what}: the idle window ({setting.idle_s:g} s) is shorter than the watcher's "
                            f"sampling ({setting.sample_s:g} s)", "make the window longer than one sample "
                            "(e.g. autostop: 30m), or sample more often")
    if setting.idle_s < 2 * MIN_INTERVAL_S:
        raise AutostopError(f"{what}: an idle window of {setting.idle_s:g} s is too short to judge",
                            "write at least 2s (minutes in practice: autostop: 30m)")
    if setting.idle_s > MAX_WINDOW_S:
        raise AutostopError(f"{what}: an idle window of {setting.idle_s / 86400:.0f} days is longer than a week",
                            "write a window of at most 7d, or leave autostop out")
    if not 0 < setting.gpu_threshold <= 100:
        raise AutostopError(f"{what}: gpu_threshold {setting.gpu_threshold:g} is not a utilization % in (0, 100]",
                            "the default is 5 (a GPU under 5 % is idle)")
    if setting.hook is not None and (not setting.hook.strip() or "\0" in setting.hook or len(setting.hook) > 4096):
        raise AutostopError(f"{what}: the hook must be a non-empty command line",
                            "e.g. hook: python save_checkpoint.py")
    return setting


def describe_window(seconds: float) -> str:
    """90 m, 45 s, 2 h 5 m."""
    seconds = max(0, int(round(seconds)))
    if seconds < 120:
        return f"{seconds} s"
    minutes = seconds // 60
    return f"{minutes} m" if minutes < 120 else f"{minutes // 60} h {minutes % 60} m"


def from_flag(text: str) -> Autostop:
    """`up --autostop 90m`."""
    return validate(Autostop(parse_duration(text, "--autostop")), "--autostop")
