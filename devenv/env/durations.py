"""How devenv writes a duration in a table column or a progress line (L0): 42s, 5m10s, 1h01m."""

from __future__ import annotations


def compact_duration(seconds: float, seconds_unit: str = "s") -> str:
    """42 -> '42s', 310 -> '5m10s', 3700 -> '1h01m' (whole seconds, cut, not rounded); seconds_unit spells the
    unit of a duration under a minute (' s': '42 s', as a sentence writes it)."""
    s = int(seconds)
    if s < 60:
        return f"{s}{seconds_unit}"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"
