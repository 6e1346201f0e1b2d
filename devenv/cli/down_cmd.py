"""`devenv down HOST`: remove the environment's container; the workspace volume stays unless --purge."""

from __future__ import annotations

import sys

import click

from devenv.cli import main
from devenv.cli.common import accept_new_host_option, env_option
from devenv.cli.render import emit_json
from devenv.errors import NotConfirmed
from devenv.services.session import open_env


@main.command()
@click.argument("host")
@env_option
@accept_new_host_option
@click.option("--purge", is_flag=True, help="Also delete the workspace volume (asks first).")
@click.option("--yes", "-y", "assume_yes", is_flag=True, help="Do not ask before --purge deletes the workspace.")
@click.option("--json", "as_json", is_flag=True, help="Print what was removed as JSON.")
def down(host: str, env: str | None, accept_new_host: bool, purge: bool, assume_yes: bool, as_json: bool) -> None:
    """Stop and remove the environment on HOST. The workspace is kept for the next `up` unless --purge."""
    with open_env(host, env, accept_new_host=accept_new_host) as session:
        env_profile, backend = session.env, session.backend
        if purge and not assume_yes:
            volumes = backend.volumes(env_profile.name)
            if volumes:
                if not sys.stdin.isatty():
                    raise NotConfirmed(f"--purge would delete {', '.join(volumes)} on {host} and cannot ask here",
                                       "add --yes to delete the workspace without asking")
                click.confirm(f"Delete {', '.join(volumes)} on {host}, with every file in it?", abort=True,
                              err=True)
        removed = session.down(purge=purge)
    from devenv.services.background_tunnels import stop_env

    stopped = [record.id for record in stop_env(host, env_profile.name)]  # nothing left forwarding to it
    if as_json:
        emit_json({"schema_version": 1, "host": host, "env": env_profile.name, **removed.to_json(),
                   "tunnels_stopped": stopped})
        return
    for tid in stopped:
        click.echo(f"Stopped the background tunnel {tid}.")
    if not removed.items and not removed.volumes:
        click.echo(f"No environment '{env_profile.name}' on {host}: nothing to remove.")
        return
    for name in removed.items:
        click.echo(f"{removed.verb} {name} on {host}.")
    for name in removed.volumes:
        click.echo(f"Deleted volume {name} on {host}.")
    for name in removed.networks:
        click.echo(f"Removed network {name} on {host}.")
    if not purge:
        click.echo(f"The workspace is kept; `devenv up {host}` brings the environment back with it.")
