"""Click parameter types that refuse what click's own ranges let through (nan, inf, unicode digits)."""

from __future__ import annotations

import click

from devenv.config import validate


class Seconds(click.ParamType):
    """A finite number of seconds in [lo, hi]: click.FloatRange accepts nan (every comparison is False)."""

    name = "seconds"

    def __init__(self, lo: float, hi: float):
        self.lo, self.hi = lo, hi

    def convert(self, value, param, ctx):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number: float | None = float(value) if validate.finite_in(float(value), self.lo, self.hi, False) else None
        else:
            number = validate.parse_number(str(value), self.lo, self.hi, lo_open=False)
        if number is None:
            self.fail(f"{validate.preview(value)} is not a number of seconds from {self.lo:g} to {self.hi:g}",
                      param, ctx)
        return number
