"""Rendering helpers shared by commands: JSON for scripts, rich tables for people."""

from __future__ import annotations

import json
from typing import Any

import click


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


STATUS_STYLE = {
    "pass": ("PASS", "green"),
    "warn": ("WARN", "yellow"),
    "fail": ("FAIL", "red"),
    "skip": ("SKIP", "bright_black"),
    "info": ("INFO", "cyan"),
    "not-judged": ("BUSY", "magenta"),  # measured on a shared GPU: shown, not judged
    "busy": ("BUSY", "magenta"),
}


def print_checks(report) -> None:
    """A CheckReport for people: one line a check, the remedy under what failed or warned."""
    width = max((len(c.title) for c in report.checks), default=10)
    for check in report.checks:
        label, color = STATUS_STYLE.get(check.status, (check.status.upper(), None))
        click.echo(f"  {click.style(label, fg=color, bold=True)}  {check.title:<{width}}  {check.value}")
        if check.remedy and check.status in ("fail", "warn"):
            click.echo(click.style(f"        {'':<{width}}  -> {check.remedy}", fg=color))
    counts = report.counts()
    summary = ", ".join(f"{counts[s]} {word}" for s, word in
                        (("fail", "failed"), ("warn", "warned"), ("pass", "passed"), ("skip", "skipped")) if counts[s])
    verdict = click.style("ready" if report.ok else "NOT ready", fg="green" if report.ok else "red", bold=True)
    click.echo(f"{report.host} is {verdict} for '{report.env}': {summary} ({report.elapsed_s:.1f} s)")
