"""`devenv exec HOST -- CMD...`: run a command inside the environment; its output and exit code are yours."""

from __future__ import annotations

import sys

import click

from devenv.cli import main
from devenv.cli.common import accept_new_host_option, connect, env_option, resolve_env
from devenv.cli.envcommon import open_provisioner
from devenv.config import profiles


@main.command(context_settings={"ignore_unknown_options": True})
@click.argument("host")
@env_option
@accept_new_host_option
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def exec(host: str, env: str | None, accept_new_host: bool, command: tuple[str, ...]) -> None:  # noqa: A001
    """Run COMMAND in the environment on HOST (put `--` before it), streaming its output.

    Exits with the command's exit code.
    """
    argv = list(command[1:] if command[:1] == ("--",) else command)
    if not argv:
        raise click.UsageError("give a command after --, e.g. devenv exec HOST -- nvidia-smi")
    host_profile = profiles.load_host(host)
    env_profile = resolve_env(host_profile, env)
    conn = connect(host_profile, accept_new_host)
    with open_provisioner(host_profile, conn, with_key=False) as (prov, _):
        chunks, exit_code = prov.exec(env_profile.name, argv)
        for out, err in chunks:
            if out:
                sys.stdout.buffer.write(out)
                sys.stdout.buffer.flush()
            if err:
                sys.stderr.buffer.write(err)
                sys.stderr.buffer.flush()
        code = exit_code()
    raise SystemExit(code)
