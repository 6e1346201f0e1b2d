"""Live progress for long host work (pulls, builds, waits) on stderr, so stdout stays for results."""

from __future__ import annotations

import sys
import time
from typing import IO, TYPE_CHECKING, Any

import click

from devenv.checks.report import CheckReport
from devenv.env.info import ProgressEvent

if TYPE_CHECKING:
    from devenv.services.jupyter import Probe


VERBOSE = "devenv.verbose"  # in the click context's meta: `devenv -v` was given (or DEVENV_DEBUG is set)


def _context_meta() -> dict[str, Any]:
    context = click.get_current_context(silent=True)
    return context.meta if context is not None else {}


class ProgressPrinter:
    """The CLI's contract.Events: steps and build lines as they come; pull progress and waits as one
    rewritten line on a terminal; the preflight's failures; the question before recreating."""

    def __init__(self, verbose: bool | None = None):
        # None: what `devenv -v` (or DEVENV_DEBUG) says; without it a build shows its steps, not every line
        # (pip's "Requirement already satisfied" x90): the lines go to a log file, named once, and a failed
        # build's error quotes its last lines
        self.verbose = verbose if verbose is not None else bool(_context_meta().get(VERBOSE))
        self.tty = sys.stderr.isatty()
        self._log: IO[str] | None = None
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
        if event.text and (self.verbose or event.text.startswith("Step ")):
            self._end_line()
            click.echo(f"    {event.text}", err=True)
        elif event.text:
            self._keep(event.text)

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

    def _keep(self, line: str) -> None:
        """A build line not shown: into the build log (0600, new for each command), named on the first one."""
        if self._log is None:
            from devenv.config import paths

            path = paths.state_dir() / "logs" / "build.log"
            paths.write_private(path, "")
            self._log = open(path, "a")  # noqa: SIM115  (closed by done())
            self._end_line()
            click.echo(f"    (each step's output: {path}; `devenv -v ...` shows it here)", err=True)
        self._log.write(line.rstrip("\n") + "\n")
        self._log.flush()

    def done(self) -> None:
        """The end of the work: a rewritten line on screen is ended."""
        self._end_line()
        if self._log is not None:
            self._log.close()
            self._log = None

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
