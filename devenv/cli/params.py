"""Click parameter types that refuse what click's own ranges let through (nan, inf, unicode digits)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from devenv.config import validate

if TYPE_CHECKING:  # generic in the click mypy reads; a plain class at run time in click 8.1 (pyproject allows it)
    _FloatParam = click.ParamType[float]
else:
    _FloatParam = click.ParamType


class Seconds(_FloatParam):
    """A finite number of seconds in [lo, hi]: click.FloatRange accepts nan (every comparison is False)."""

    name = "seconds"

    def __init__(self, lo: float, hi: float):
        self.lo, self.hi = lo, hi

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number: float | None = float(value) if validate.finite_in(float(value), self.lo, self.hi, False) else None
        else:
            number = validate.parse_number(str(value), self.lo, self.hi, lo_open=False)
        if number is None:
            self.fail(f"{validate.preview(value)} is not a number of seconds from {self.lo:g} to {self.hi:g}",
                      param, ctx)
        return number


class PassThroughCommand(click.Command):
    """A command that runs the user's own COMMAND after HOST (exec, ssh): COMMAND's words are never read as
    devenv's options. Click bundles short flags and reads options anywhere, so `devenv exec box ls -th` took
    -t and -h (help, exit 0) from `ls`'s words, and `-oPath=x` before HOST printed help the same way. Here the
    words from COMMAND on are put behind a `--`, and a short-option bundle before that with a letter devenv does
    not know is bad input (exit 2)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, self._guarded(ctx, list(args)))

    def _guarded(self, ctx: click.Context, args: list[str]) -> list[str]:
        flags: set[str] = set()          # short options that take no value
        valued: set[str] = set()         # short options that take one
        long_valued: set[str] = set()
        for param in self.get_params(ctx):
            if not isinstance(param, click.Option):
                continue
            for opt in (*param.opts, *param.secondary_opts):
                takes = not (param.is_flag or param.count)
                if len(opt) == 2 and opt[0] == "-" and opt[1] != "-":
                    (valued if takes else flags).add(opt[1])
                elif opt.startswith("--") and takes:
                    long_valued.add(opt)
        positionals, i = 0, 0
        while i < len(args):
            word = args[i]
            if word == "--":
                return args
            if word.startswith("--"):
                i += 2 if word in long_valued else 1      # --env NAME; --env=NAME is one word
                continue
            if word.startswith("-") and len(word) > 1:
                letters = word[1:]
                for j, letter in enumerate(letters):
                    if letter in valued:                  # the rest of the word, or the next one, is its value
                        i += 0 if j + 1 < len(letters) else 1
                        break
                    if letter not in flags:
                        if positionals == 0:
                            shown = word if len(word) <= 40 else word[:37] + "..."
                            raise click.UsageError(f"'{shown}' is not an option of `devenv {self.name}`; "
                                                   f"its options are in `devenv {self.name} --help`", ctx)
                        return args[:i] + ["--"] + args[i:]   # COMMAND's own option, e.g. ssh's -N
                i += 1
                continue
            positionals += 1
            if positionals == 2:                          # COMMAND starts here
                return args[:i] + ["--"] + args[i:]
            i += 1
        return args
