"""Live progress for long host work (pulls, builds, waits) on stderr, so stdout stays for results."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

import click

from devenv.checks.report import CheckReport
from devenv.env.info import ProgressEvent

if TYPE_CHECKING:
    from devenv.services.jupyter import Probe


class ProgressPrinter:
    """The CLI's contract.Events: steps and build lines as they come; pull progress and waits as one
    rewritten line on a terminal; the preflight's failures; the question before recreating."""

    def __init__(self, verbose: bool = True):
        self.verbose = verbose
        self.tty = sys.stderr.isatty()
        self._layers: dict[str, tuple[int, int]] = {}
        self._last = 0.0
        self._open = False      # a \r-rewritten line is on screen

    def step(self, text: str) -> None:
        self._end_line()
        click.secho(f"==> {text}", err=True, bold=True)

    def progress(self, event: ProgressEvent) -> None:
        if event.layer and event.total:
            self._layers[event.layer] = (event.current or 0, event.total)
            now = time.monotonic()
            if now - self._last >= (0.2 if self.tty else 5.0):
                self._last = now
                done = sum(c for c, _ in self._layers.values())
                total = sum(t for _, t in self._layers.values())
                self._rewrite(f"    {done / 1e6:8.1f} / {total / 1e6:.1f} MB in {len(self._layers)} layers")
            return
        if self.verbose and event.text:
            self._end_line()
            click.echo(f"    {event.text}", err=True)

    def waiting(self, waited: float, probe: Probe) -> None:
        down = ", ".join(line.split(" ")[0] for line in probe.text.splitlines() if " down" in line)
        self._rewrite(f"    waiting {waited:5.1f} s ({down or 'starting'} not answering yet)")

    def checked(self, report: CheckReport) -> None:
        """The preflight of `up`: shown only when it stops `up` (each failed check with its remedy)."""
        if not report.ok:
            from devenv.cli.render import print_checks

            self._end_line()
            print_checks(report, err=True)  # stdout is for the result (`up --json` prints JSON there only)

    def confirm(self, question: str, details: list[str]) -> bool:
        self._end_line()
        click.echo(question, err=True)
        for line in details:
            click.echo(f"    {line}", err=True)
        if not sys.stdin.isatty():
            return False  # never recreate silently; the error says to pass --yes
        return click.confirm("Recreate?", default=False, err=True)

    def done(self) -> None:
        """The end of the work: a rewritten line on screen is ended."""
        self._end_line()

    def _rewrite(self, line: str) -> None:
        if self.tty:
            click.echo("\r" + line + "\033[K", err=True, nl=False)
            self._open = True

    def _end_line(self) -> None:
        if self._open:
            click.echo("", err=True)
            self._open = False
        self._layers.clear()
        self._last = 0.0
