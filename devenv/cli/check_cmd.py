"""`devenv check HOST`: can this host run my environment? Each check with the value seen and a remedy."""

from __future__ import annotations

import click

from devenv.cli import main
from devenv.cli.common import accept_new_host_option, connect, env_option, resolve_env
from devenv.cli.render import emit_json, print_checks
from devenv.config import profiles
from devenv.services.preflight import run_check


@main.command()
@click.argument("host")
@env_option
@accept_new_host_option
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def check(host: str, env: str | None, accept_new_host: bool, as_json: bool) -> None:
    """Check HOST before touching it: SSH, OS, disk, Docker, NVIDIA driver, toolkit, CUDA and arch compatibility.

    Exits 0 only when no check fails (warnings allowed).
    """
    host_profile = profiles.load_host(host)
    env_profile = resolve_env(host_profile, env)
    conn = connect(host_profile, accept_new_host)
    if not as_json:
        click.echo(f"Checking {host} for environment '{env_profile.name}'...", err=True)
    report = run_check(conn, host_profile, env_profile)
    if as_json:
        emit_json(report.to_dict())
    else:
        print_checks(report)
    if not report.ok:
        raise SystemExit(1)
