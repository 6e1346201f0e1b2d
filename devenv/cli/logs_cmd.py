"""`devenv logs HOST [-f]`: the environment's output (Jupyter and sshd), as the host keeps it."""

from __future__ import annotations

import click

from devenv.cli import main
from devenv.cli.common import accept_new_host_option, env_option
from devenv.services.session import open_env


@main.command()
@click.argument("host")
@env_option
@accept_new_host_option
@click.option("--follow", "-f", is_flag=True, help="Keep printing new lines until Ctrl-C.")
@click.option("--tail", "-n", "tail", default="200", show_default=True, metavar="N",
              help="Lines from the end to start with ('all' for everything).")
def logs(host: str, env: str | None, accept_new_host: bool, follow: bool, tail: str) -> None:
    """Print the environment's log on HOST (with -f, follow it)."""
    if tail != "all" and not (tail.isascii() and tail.isdigit() and len(tail) <= 9):
        raise click.BadParameter("give a number of lines or 'all'", param_hint="--tail")
    with open_env(host, env, accept_new_host=accept_new_host) as session:
        lines = session.backend.logs(session.env.name, tail=int(tail) if tail != "all" else "all", follow=follow)
        for line in lines:
            click.echo(line)
