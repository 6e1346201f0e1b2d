"""`devenv check HOST...`: can this host run my environment? Each check with the value seen and a remedy."""

from __future__ import annotations

from typing import Any

import click

from devenv.checks.report import CheckReport
from devenv.cli import main
from devenv.cli.common import EXIT_FAILED, accept_new_host_option, env_option, finish_per_host, host_names, per_host
from devenv.cli.render import emit_json, print_checks
from devenv.errors import DevenvError
from devenv.services.session import open_env


def _check_one(name: str, env: str | None, accept_new_host: bool) -> CheckReport:
    with open_env(name, env, accept_new_host=accept_new_host) as session:
        return session.check()


@main.command()
@click.argument("hosts", nargs=-1, required=True, metavar="HOST...")
@env_option
@accept_new_host_option
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def check(hosts: tuple[str, ...], env: str | None, accept_new_host: bool, as_json: bool) -> None:
    """Check HOST before touching it: SSH, OS, disk, Docker, NVIDIA driver, toolkit, CUDA and arch compatibility.

    HOST is a host profile, an @group, an ssh alias or user@host[:port]. Exits 0 only when no check fails
    (warnings allowed), 1 when one fails, 7 when a GPU is UNHEALTHY (its health section names the fault),
    3 when the host cannot be reached, 2 for a bad name.
    """
    names = host_names(hosts)
    if len(names) == 1 and not hosts[0].startswith("@"):
        with open_env(names[0], env, accept_new_host=accept_new_host) as session:
            if not as_json:
                click.echo(f"Checking {names[0]} for environment '{session.env.name}'...", err=True)
                if session.env_note:
                    click.echo(f"  ({session.env_note})", err=True)
            report = session.check()
        if as_json:
            emit_json(report.to_dict())
        else:
            print_checks(report)
        if not report.ok:
            raise SystemExit(report.fail_code)
        return
    if not as_json:
        click.echo(f"Checking {', '.join(names)}...", err=True)
    results = per_host(names, lambda n: _check_one(n, env, accept_new_host))
    codes = [err.exit_code if err else (0 if report is not None and report.ok else
                                        report.fail_code if report is not None else EXIT_FAILED)
             for _, report, err in results]
    finish_per_host(results, codes, as_json, lambda report: report.to_dict(), print_checks,
                    verdict=group_verdict(results))


def group_verdict(results: list[tuple[str, CheckReport | None, DevenvError | None]]) -> dict[str, Any]:
    """The verdict over several hosts (an @group): which are ready, and by name which have an UNHEALTHY GPU (with
    its first finding), which failed a check, which could not be checked."""
    unhealthy = {name: [f"{c.title}: {c.value}" for c in r.unhealthy] for name, r, _ in results
                 if r is not None and r.unhealthy}
    failed = [name for name, r, _ in results if r is not None and not r.ok and name not in unhealthy]
    unreachable = {name: err.message for name, r, err in results if r is None and err is not None}
    ready = [name for name, r, _ in results if r is not None and r.ok]
    status = "unhealthy" if unhealthy else "fail" if failed or unreachable else "pass"
    parts = [f"{len(ready)} of {len(results)} ready" + (f" ({', '.join(ready)})" if ready else "")]
    parts += [f"UNHEALTHY {name}: {findings[0]}" + (f" (+{len(findings) - 1} more)" if len(findings) > 1 else "")
              for name, findings in unhealthy.items()]
    if failed:
        parts.append(f"failed: {', '.join(failed)}")
    if unreachable:
        parts.append(f"not checked: {', '.join(unreachable)}")
    return {"status": status, "ready": ready, "unhealthy": unhealthy, "failed": failed, "unreachable": unreachable,
            "summary": "; ".join(parts)}
