"""`devenv tunnels`: the tunnels held in the background (`tunnel|jupyter ... --background`); `stop` ends them."""

from __future__ import annotations

import json
import time

import click

from devenv.cli import main
from devenv.env.durations import compact_duration
from devenv.errors import BadInput
from devenv.services import background_tunnels as registry


@main.group("tunnels", invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print them as one JSON document (docs/json.md).")
@click.pass_context
def tunnels_cmd(ctx: click.Context, as_json: bool) -> None:
    """List the tunnels held in the background: host, environment, ports, state, since, reconnects."""
    if ctx.invoked_subcommand is not None:
        return
    records = registry.all_records()
    if as_json:
        click.echo(json.dumps({"schema_version": 1, "tunnels": [r.to_json() for r in records]}))
        return
    if not records:
        click.echo("No tunnels held in the background (`devenv tunnel HOST PORT --background` starts one).")
        return
    now = time.time()
    click.echo(f"{'ID':<36} {'HOST':<14} {'ENV':<12} {'PORTS':<20} {'STATE':<13} {'SINCE':>8} RECONNECTS")
    for r in records:
        ports = ",".join(f"{f['local_port']}->{f['env_port']}" for f in r.forwards)
        click.echo(f"{r.id:<36} {r.host:<14} {r.env:<12} {ports:<20} {r.state:<13} "
                   f"{compact_duration(max(0.0, now - r.since)):>8} {r.reconnects}")


@tunnels_cmd.command("stop")
@click.argument("tunnel_id", required=False, metavar="[ID]")
@click.option("--all", "stop_all", is_flag=True, help="Stop every tunnel held in the background.")
def stop_cmd(tunnel_id: str | None, stop_all: bool) -> None:
    """Stop a tunnel held in the background (its ID from `devenv tunnels`), or --all."""
    if bool(tunnel_id) == stop_all:
        raise click.UsageError("name either a tunnel ID (`devenv tunnels` lists them) or --all")
    if stop_all:
        records = registry.all_records()
    else:
        found = registry.find(str(tunnel_id))
        if found is None:
            known = ", ".join(r.id for r in registry.all_records()) or "none"
            raise BadInput(f"no tunnel {tunnel_id} is held in the background (held now: {known})",
                           "`devenv tunnels` lists them")
        records = [found]
    for record in records:
        ended = registry.stop(record)
        click.echo(f"Stopped {record.id} (pid {record.pid})" + ("" if ended else ": killed, it did not end in time"))
    if not records:
        click.echo("No tunnels held in the background.")
