"""`devenv jupyter HOST`: a tunnel to the environment's Jupyter and its URL with the token."""

from __future__ import annotations

import json
import webbrowser
from collections.abc import Callable
from typing import Any

import click

from devenv.cli import main
from devenv.cli.background import background_options, new_record
from devenv.cli.background import start as start_background
from devenv.cli.common import accept_new_host_option, env_option
from devenv.cli.envcommon import hold, tunnel_shown
from devenv.cli.ports import require_free
from devenv.errors import DevenvError
from devenv.services.background_tunnels import TunnelRecord, tunnel_id
from devenv.services.background_tunnels import find as find_background
from devenv.services.held_tunnel import Tunnel
from devenv.services.session import EnvSession, open_env


@main.command("jupyter")
@click.argument("host")
@env_option
@accept_new_host_option
@click.option("--port", "-p", "local_port", type=click.IntRange(1, 65535),
              help="Local port; an error when it is taken (default: the profile's, or a free one if that is taken).")
@click.option("--open", "open_browser", is_flag=True, help="Open the URL in a browser.")
@click.option("--json", "as_json", is_flag=True, help="Print the URL and ports as one JSON line (docs/json.md).")
@background_options
def jupyter_cmd(host: str, env: str | None, accept_new_host: bool, local_port: int | None,
                open_browser: bool, as_json: bool, background: bool, held_as: str | None) -> None:
    """Open a tunnel to the environment's Jupyter on HOST and print its URL (with the token) until Ctrl-C."""
    if background:
        argv = ["jupyter", host, *(["--env", env] if env else []), *(["--port", str(local_port)] if local_port else []),
                *(["--accept-new-host"] if accept_new_host else [])]
        start_background(tunnel_id(host, env, "jupyter"), argv, as_json)
        if open_browser:
            found = find_background(tunnel_id(host, env, "jupyter"))
            if found is not None and found.url:
                webbrowser.open(found.url)
        return
    if local_port:
        require_free(local_port, "--port")
    with open_env(host, env, accept_new_host=accept_new_host) as session:
        access = session.backend.jupyter_access(session.env.name)
    url, tunnel = session.open_jupyter(access, local_port)  # None: already on this machine's 127.0.0.1

    def show(url: str, host_port: int) -> None:
        if as_json:
            local = tunnel.forwards[0].local_port if tunnel is not None else access.port
            click.echo(json.dumps({"schema_version": 1, "host": host, "env": access.status.env, "url": url,
                                   "local_port": local, "host_port": host_port,
                                   "tunnel": tunnel.kind if tunnel is not None else None}))
        else:
            click.echo(url)

    with tunnel_shown():
        show(url, access.port)
        if open_browser:
            webbrowser.open(url)
        if tunnel is not None:
            record = new_record(held_as, host, access.status.env, "jupyter", tunnel.forwards, url) if held_as else None
            reopen = reopen_jupyter(session, url, show, record)
            hold(tunnel, host, reopen, session.jupyter_moved, record)


def reopen_jupyter(session: EnvSession, url: str, show: Callable[[str, int], None] | None = None,
                   record: TunnelRecord | None = None) -> Callable[[list[Any]], Tunnel]:
    """How a held Jupyter tunnel is opened again: found afresh through the backend, on the same local port.
    A URL that changed (a restarted environment, a new token) is shown again as the first was (`show`: a line
    of stdout, the URL or the --json line), so that a script reading them reads the new one next."""
    shown = [url]

    def reopen(forwards: list[Any]) -> Tunnel:
        new_url, tunnel = session.reopen_jupyter(forwards[0].local_port)
        if tunnel is None:
            raise DevenvError("Jupyter moved to this machine", "this is a bug in devenv")
        if new_url != shown[-1]:
            shown.append(new_url)
            if record is not None:
                record.url = new_url   # written with the state line that follows
            click.echo("Jupyter's URL changed (the environment restarted; a new token): the new one follows",
                       err=True)
            if show is not None:
                show(new_url, tunnel.forwards[0].remote_port)
            else:
                click.echo(new_url)
        return tunnel

    return reopen
