"""`devenv ssh HOST`: a shell (or a command) inside the environment with the user's own OpenSSH client.

The entry devenv writes (config dir's ssh/config) reaches the environment through its host like ProxyJump,
pins the environment's own host key and offers only devenv's key. `--config` prints it and the Include line
that lets VS Code Remote-SSH and every other ssh tool use it.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
from typing import NoReturn

import click

from devenv.cli import main
from devenv.cli.common import accept_new_host_option, env_option, load_host
from devenv.cli.params import PassThroughCommand
from devenv.config import paths
from devenv.errors import DevenvError
from devenv.remote import openssh
from devenv.services.environments.contract import Shell
from devenv.services.environments.registry import known_backend
from devenv.services.session import open_env
from devenv.services.ssh_entry import ssh_files


@main.command(cls=PassThroughCommand, context_settings={"ignore_unknown_options": True})
@click.argument("host")
@env_option
@accept_new_host_option
@click.option("--config", "show_config", is_flag=True,
              help="Print the ssh config entry and how to include it (VS Code Remote-SSH), then exit.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def ssh(host: str, env: str | None, accept_new_host: bool, show_config: bool, command: tuple[str, ...]) -> None:
    """Open a shell inside the environment on HOST (or run COMMAND after --), with OpenSSH."""
    host_profile = load_host(host)
    ssh_binary = shutil.which("ssh")
    if ssh_binary is None and not show_config:
        raise DevenvError("OpenSSH's `ssh` is not installed on this machine",
                          "install openssh-client (apt install openssh-client), or use `devenv exec HOST -- CMD`")
    kind = known_backend(host_profile)
    if (not show_config and not host_profile.local and kind is not None and kind.shell is Shell.HOST
            and not accept_new_host):  # a new host's key is recorded by devenv's connection first
        # known without connecting: the host's own sshd serves the shell, and OpenSSH does it all
        _run_ssh([ssh_binary or "ssh", *openssh.host_options(host_profile), *_command(command)])
    with open_env(host_profile, env, accept_new_host=accept_new_host) as session:
        alias, block = session.ssh_alias()
        if alias is None:  # the environment is the host, whose own sshd serves the shell
            if show_config or session.host.local:
                raise DevenvError(f"{host} runs environments on the host itself (runtime: {session.host.runtime}): "
                                  "there is no separate sshd", "use `ssh` to the host as you do now")
            _run_ssh([ssh_binary or "ssh", *openssh.host_options(session.host), *_command(command)])
    config, _ = ssh_files()
    if show_config:
        click.echo(f"# {alias}: kept in {config}, refreshed by `devenv up` and `devenv ssh`")
        click.echo(block)
        click.echo(f"# To use it from VS Code Remote-SSH or plain `ssh {alias}`, put this line at the TOP of "
                   f"{paths.ssh_config_path()}:")
        click.echo(f"Include {config}")
        return
    _run_ssh([ssh_binary or "ssh", "-F", str(config), "--", alias, *_command(command)])


def _command(command: tuple[str, ...]) -> list[str]:
    return list(command[1:] if command[:1] == ("--",) else command)


def _run_ssh(argv: list[str]) -> NoReturn:
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C belongs to the remote shell
    try:
        code = subprocess.call(argv)
    finally:
        signal.signal(signal.SIGINT, previous)
    raise SystemExit(code)
