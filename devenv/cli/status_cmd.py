"""`devenv status [HOST...]`: the environments each host reports (labels), so it works without local state."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import click

from devenv.cli import main
from devenv.cli.common import accept_new_host_option, connect
from devenv.cli.envcommon import open_provisioner
from devenv.cli.render import emit_json
from devenv.config import profiles
from devenv.errors import DevenvError

STATE_COLOR = {"running": "green", "created": "yellow", "exited": "red", "restarting": "red", "absent": None}


def _host_status(name: str, accept_new_host: bool) -> tuple[str, list, str | None]:
    try:
        host = profiles.load_host(name)
        conn = connect(host, accept_new_host)
        with open_provisioner(host, conn, with_key=False) as (prov, _):
            return name, prov.status(), None
    except DevenvError as exc:
        return name, [], exc.message + (f" ({exc.hint})" if exc.hint else "")


@main.command()
@click.argument("hosts", nargs=-1)
@accept_new_host_option
@click.option("--json", "as_json", is_flag=True, help="Print the environments as JSON.")
def status(hosts: tuple[str, ...], accept_new_host: bool, as_json: bool) -> None:
    """Environments on HOSTs (default: every host profile), read from the hosts themselves.

    Exits 1 when a host could not be asked.
    """
    names = list(hosts) or profiles.names("hosts")
    with ThreadPoolExecutor(max_workers=min(8, len(names) or 1)) as pool:
        results = list(pool.map(lambda n: _host_status(n, accept_new_host), names))
    failed = [(name, error) for name, _, error in results if error]
    if as_json:
        emit_json({"environments": [s.to_dict() for _, found, _ in results for s in found],
                   "errors": {name: error for name, error in failed}})
    else:
        rows = [s for _, found, _ in results for s in found]
        if rows:
            header = f"{'HOST':<14} {'ENV':<12} {'OWNER':<10} {'STATE':<11} {'JUPYTER':<16} {'SSH':<16} SPEC"
            click.echo(click.style(header, bold=True))
            for s in rows:
                state = click.style(f"{s.state:<11}", fg=STATE_COLOR.get(s.state))
                jup = f"127.0.0.1:{s.ports['jupyter']}" if "jupyter" in s.ports else "-"
                ssh = f"127.0.0.1:{s.ports['ssh']}" if "ssh" in s.ports else "-"
                click.echo(f"{s.host:<14} {s.env:<12} {s.owner:<10} {state} {jup:<16} {ssh:<16} "
                           f"{(s.spec_hash or '-')[:12]}{'  ' + s.detail if s.detail else ''}")
        elif not failed:
            click.echo(f"No environments on {', '.join(names)}.")
        for name, error in failed:
            click.secho(f"{name}: {error}", fg="red", err=True)
    if failed:
        raise SystemExit(1)
