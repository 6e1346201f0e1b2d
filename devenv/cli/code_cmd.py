"""`devenv code HOST`: VS Code Remote-SSH on the environment's workspace, through devenv's ssh entry.

VS Code resolves `ssh-remote+devenv-HOST-ENV` from the user's ssh config, so the entry must be included there
(`devenv ssh-config install`); devenv says so when it is not, and never edits the file by itself.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess

import click

from devenv.cli import main
from devenv.cli.common import accept_new_host_option, env_option
from devenv.config import paths
from devenv.errors import DevenvError


@main.command()
@click.argument("host")
@env_option
@accept_new_host_option
@click.option("--path", "subdir", metavar="DIR", help="A folder in the workspace to open (e.g. the synced project).")
@click.option("--print", "print_only", is_flag=True, help="Print the command instead of running it.")
def code(host: str, env: str | None, accept_new_host: bool, subdir: str | None, print_only: bool) -> None:
    """Open VS Code (Remote-SSH) on the environment's workspace on HOST."""
    from devenv.cli.env_entry import env_target
    from devenv.cli.sshconfig_cmd import devenv_ssh_config, user_ssh_config
    from devenv.config import ssh_include
    from devenv.remote.rsync import check_subdir
    from devenv.services.environments.contract import Shell
    from devenv.services.environments.registry import backend_class

    folder_in = check_subdir(subdir, "--path") if subdir else None
    host_profile, _, target = env_target(host, env, accept_new_host)
    if backend_class(host_profile).shell is Shell.HOST or not target.destination:
        raise DevenvError(f"{host} runs environments on the host itself: open it as any ssh host",
                          f"code --remote ssh-remote+{host} ~/{target.workspace}")
    folder = f"{target.workspace.rstrip('/')}/{folder_in}" if folder_in else target.workspace
    argv = ["code", "--remote", f"ssh-remote+{target.destination}", folder]
    user_config = user_ssh_config()
    text = (paths.read_user_file(user_config, "the ssh config") or b"").decode("utf-8", "replace")
    if not ssh_include.has_include(text, ssh_include.include_line(devenv_ssh_config())):
        click.secho(f"VS Code finds {target.destination} only through {user_config}: run "
                    "`devenv ssh-config install` once (one Include line), or set remote.SSH.configFile to "
                    f"{devenv_ssh_config()}", fg="yellow", err=True)
    binary = shutil.which("code")
    if print_only or binary is None:
        click.echo(shlex.join(argv))
        if binary is None and not print_only:
            click.echo("(`code` is not on PATH: run the line above where VS Code is installed, or in VS Code: "
                       "Remote-SSH: Connect to Host...)", err=True)
        return
    raise SystemExit(subprocess.call([binary, *argv[1:]]))
