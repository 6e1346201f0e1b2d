"""Rendering shared by commands: JSON for scripts, and the one renderer of check results for people
(`check`, `compat` and `sanity` all print checks.report.CheckResult lines through print_result)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import click

from devenv.checks.report import CheckReport, CheckResult, Status


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


STATUS_STYLE: dict[Status, tuple[str, str | None]] = {
    Status.PASS: ("PASS", "green"),
    Status.WARN: ("WARN", "yellow"),
    Status.FAIL: ("FAIL", "red"),
    Status.SKIP: ("SKIP", "bright_black"),
    Status.INFO: ("INFO", "cyan"),
    Status.UNKNOWN: ("????", "magenta"),
    Status.NO_GPU: ("NO GPU", "cyan"),
    Status.NOT_JUDGED: ("BUSY", "magenta"),  # measured on a shared GPU: shown, not judged
    Status.BUSY: ("BUSY", "magenta"),
    Status.UNHEALTHY: ("UNHEALTHY", "red"),
}
_NEEDS_REMEDY = (Status.FAIL, Status.WARN, Status.UNKNOWN)


def badge(status: Status | str) -> str:
    label, color = STATUS_STYLE.get(Status(status), (str(status).upper(), None))
    return click.style(f"{label:<4}", fg=color, bold=True)


def print_result(result: CheckResult, width: int = 0, *, err: bool = False, source: bool = False) -> None:
    """One result: badge, title (padded to width), what was seen; under it the error the user would meet
    (compat), the remedy of what failed or warned, and (source=True) where its threshold comes from."""
    color = STATUS_STYLE.get(result.status, ("", None))[1]
    click.echo(f"  {badge(result.status)}  {result.title:<{width}}  {result.value}".rstrip(), err=err)
    message = result.details.get("message")
    if message:
        click.echo("        what you would see:", err=err)
        for line in str(message).splitlines():
            click.echo(click.style(f"          {line}", fg=color), err=err)
    if result.remedy and result.status in _NEEDS_REMEDY:
        click.echo(click.style(f"        {'':<{width}}  -> {result.remedy}", fg=color), err=err)
    if source and result.details.get("source"):
        click.echo(click.style(f"          threshold from: {result.details['source']}", dim=True), err=err)


def print_results(results: Iterable[CheckResult], *, align: bool = True, err: bool = False,
                  source: bool = False) -> None:
    results = list(results)
    width = max((len(r.title) for r in results), default=10) if align else 0
    for result in results:
        print_result(result, width, err=err, source=source)


def print_checks(report: CheckReport, *, err: bool = False) -> None:
    """A CheckReport for people: one line a check, the remedy under what failed or warned."""
    print_results(report.checks, err=err)
    counts = report.counts()
    summary = ", ".join(f"{counts[s]} {word}" for s, word in
                        ((Status.FAIL, "failed"), (Status.WARN, "warned"), (Status.PASS, "passed"),
                         (Status.SKIP, "skipped")) if counts[s])
    verdict = click.style("ready" if report.ok else "NOT ready", fg="green" if report.ok else "red", bold=True)
    click.echo(f"{report.host} is {verdict} for '{report.env}': {summary} ({report.elapsed_s:.1f} s)", err=err)
    sick = report.unhealthy
    if sick:
        first = sick[0]
        click.echo(click.style("UNHEALTHY", fg="red", bold=True)
                   + f": {first.title}: {first.value}" + (f" (and {len(sick) - 1} more)" if len(sick) > 1 else ""),
                   err=err)
