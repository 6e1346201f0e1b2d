"""`devenv jupyter HOST`: a tunnel to the environment's Jupyter and its URL with the token."""

from __future__ import annotations

import webbrowser

import click

from devenv.cli import main
from devenv.cli.common import accept_new_host_option, connect, env_option, load_host, resolve_env
from devenv.cli.envcommon import hold, open_forwards, open_provisioner
from devenv.cli.ports import require_free
from devenv.env.spec import CONTAINER_PORTS
from devenv.services import jupyter


@main.command("jupyter")
@click.argument("host")
@env_option
@accept_new_host_option
@click.option("--port", "-p", "local_port", type=click.IntRange(1, 65535),
              help="Local port; an error when it is taken (default: the profile's, or a free one if that is taken).")
@click.option("--open", "open_browser", is_flag=True, help="Open the URL in a browser.")
@click.option("--json", "as_json", is_flag=True, help="Print the URL and ports as one JSON line (docs/json.md).")
def jupyter_cmd(host: str, env: str | None, accept_new_host: bool, local_port: int | None,
                open_browser: bool, as_json: bool) -> None:
    """Open a tunnel to the environment's Jupyter on HOST and print its URL (with the token) until Ctrl-C."""
    if local_port:
        require_free(local_port, "--port")
    host_profile = load_host(host)
    env_profile = resolve_env(host_profile, env)
    conn = connect(host_profile, accept_new_host)
    with open_provisioner(host_profile, conn, with_key=False) as (prov, _):
        status, token = prov.jupyter_access(env_profile.name)
    host_port = status.ports["jupyter"]
    if host_profile.local:  # already on this machine's 127.0.0.1: nothing to forward
        url = jupyter.lab_url(host_port, token)
        _say(url, as_json, host, env_profile.name, host_port, host_port, None)
        if open_browser:
            webbrowser.open(url)
        return
    preferred = local_port or env_profile.ports.get("jupyter", CONTAINER_PORTS["jupyter"])
    tunnel = open_forwards(host_profile, conn, [("jupyter", "127.0.0.1", host_port, preferred)])
    url = jupyter.lab_url(tunnel.forwards[0].local_port, token)
    _say(url, as_json, host, env_profile.name, tunnel.forwards[0].local_port, host_port, tunnel.kind)
    if open_browser:
        webbrowser.open(url)
    hold(tunnel, host_profile)


def _say(url: str, as_json: bool, host: str, env: str, local_port: int, host_port: int, tunnel: str | None) -> None:
    """The URL, or one JSON line (a script reads it while the tunnel is held)."""
    if not as_json:
        click.echo(url)
        return
    import json

    click.echo(json.dumps({"schema_version": 1, "host": host, "env": env, "url": url, "local_port": local_port,
                           "host_port": host_port, "tunnel": tunnel}))
