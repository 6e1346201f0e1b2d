"""`devenv ssh HOST`: a shell (or a command) inside the environment with the user's own OpenSSH client.

The entry devenv writes (config dir's ssh/config) reaches the environment through its host like ProxyJump,
pins the environment's own host key and offers only devenv's key. `--config` prints it and the Include line
that lets VS Code Remote-SSH and every other ssh tool use it.
"""

from __future__ import annotations

import shutil
import signal
import subprocess

import click

from devenv.cli import main
from devenv.cli.common import accept_new_host_option, connect, env_option, load_host, resolve_env
from devenv.cli.envcommon import open_provisioner
from devenv.config import paths
from devenv.errors import DevenvError
from devenv.remote import openssh
from devenv.runtimes.factory import settle


def ssh_files() -> tuple:
    base = paths.config_dir() / "ssh"
    return base / "config", base / "known_hosts"


def write_env_entry(host, env_name: str, port: int, host_key: str, identity_file) -> str:
    """Write (or refresh) the environment's block and pinned key; returns its alias."""
    config, known_hosts = ssh_files()
    alias = openssh.env_alias(host.name, env_name)
    block = openssh.env_config_entry(alias, host, port, identity_file, known_hosts,
                                     shutil.which("ssh") or "ssh")
    old_config = config.read_text() if config.is_file() else ""
    old_known = known_hosts.read_text() if known_hosts.is_file() else ""
    pinned = openssh.known_hosts_line(alias, host_key)
    paths.write_private(known_hosts, openssh.replace_known_host(old_known, alias, pinned))
    paths.write_private(config, openssh.replace_block(old_config, alias, block))
    return alias


@main.command(context_settings={"ignore_unknown_options": True})
@click.argument("host")
@env_option
@accept_new_host_option
@click.option("--config", "show_config", is_flag=True,
              help="Print the ssh config entry and how to include it (VS Code Remote-SSH), then exit.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def ssh(host: str, env: str | None, accept_new_host: bool, show_config: bool, command: tuple[str, ...]) -> None:
    """Open a shell inside the environment on HOST (or run COMMAND after --), with OpenSSH."""
    host_profile = load_host(host)
    env_profile = resolve_env(host_profile, env)
    ssh_binary = shutil.which("ssh")
    if ssh_binary is None and not show_config:
        raise DevenvError("OpenSSH's `ssh` is not installed on this machine",
                          "install openssh-client (apt install openssh-client), or use `devenv exec HOST -- CMD`")
    conn = None
    if host_profile.runtime == "auto" and not show_config:
        conn = connect(host_profile, accept_new_host)
        host_profile = settle(host_profile, conn)
    if host_profile.runtime == "host" and not host_profile.local and not show_config:
        # No second sshd: the environment is the host, whose own sshd serves the shell. A new host's key is
        # recorded by devenv's own connection (--accept-new-host); OpenSSH then checks it strictly.
        argv = openssh.host_options(host_profile)  # checked before anything connects
        if accept_new_host and conn is None:
            connect(host_profile, accept_new_host).open()
        _run_ssh([ssh_binary, *argv, *_command(command)])
    conn = conn or connect(host_profile, accept_new_host)
    with open_provisioner(host_profile, conn) as (prov, key):
        port, host_key = prov.ssh_target(env_profile.name)
    alias = write_env_entry(host_profile, env_profile.name, port, host_key, key.private_path)
    config, _ = ssh_files()
    if show_config:
        block = openssh.env_config_entry(alias, host_profile, port, key.private_path, ssh_files()[1],
                                         ssh_binary or "ssh")
        click.echo(f"# {alias}: kept in {config}, refreshed by `devenv up` and `devenv ssh`")
        click.echo(block)
        click.echo(f"# To use it from VS Code Remote-SSH or plain `ssh {alias}`, put this line at the TOP of "
                   f"{paths.ssh_config_path()}:")
        click.echo(f"Include {config}")
        return
    _run_ssh([ssh_binary, "-F", str(config), "--", alias, *_command(command)])


def _command(command: tuple[str, ...]) -> list[str]:
    return list(command[1:] if command[:1] == ("--",) else command)


def _run_ssh(argv: list[str]) -> None:
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C belongs to the remote shell
    try:
        code = subprocess.call(argv)
    finally:
        signal.signal(signal.SIGINT, previous)
    raise SystemExit(code)
