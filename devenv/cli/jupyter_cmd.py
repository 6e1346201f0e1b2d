"""`devenv jupyter HOST`: a tunnel to the environment's Jupyter and its URL with the token."""

from __future__ import annotations

import webbrowser

import click

from devenv.cli import main
from devenv.cli.common import accept_new_host_option, env_option
from devenv.cli.envcommon import hold
from devenv.services.session import open_env


@main.command("jupyter")
@click.argument("host")
@env_option
@accept_new_host_option
@click.option("--port", "-p", "local_port", type=click.IntRange(1, 65535),
              help="Local port (default: the profile's, or a free one if it is taken).")
@click.option("--open", "open_browser", is_flag=True, help="Open the URL in a browser.")
def jupyter_cmd(host: str, env: str | None, accept_new_host: bool, local_port: int | None,
                open_browser: bool) -> None:
    """Open a tunnel to the environment's Jupyter on HOST and print its URL (with the token) until Ctrl-C."""
    with open_env(host, env, accept_new_host=accept_new_host) as session:
        access = session.backend.jupyter_access(session.env.name)
    url, tunnel = session.open_jupyter(access, local_port)  # None: already on this machine's 127.0.0.1
    click.echo(url)
    if open_browser:
        webbrowser.open(url)
    if tunnel is not None:
        hold(tunnel, host)
