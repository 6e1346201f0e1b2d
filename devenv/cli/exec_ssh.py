"""`exec` with stdin or a terminal: through the environment's own sshd with the user's OpenSSH.

Docker's exec API carries no stdin over devenv's connection; the environment's sshd does, and gives a pty on
request. The command's argv is quoted word by word, so the remote shell sees exactly the words given, and it
runs in the workspace, as `docker exec` would.
"""

from __future__ import annotations

import os
import shlex
import stat
import sys

from devenv.cli.ssh_cmd import _run_ssh


def stdin_has_input() -> bool:
    """True when stdin is a pipe or a file (`echo hi | devenv exec ...`, `< data`), not a terminal or /dev/null."""
    try:
        mode = os.fstat(sys.stdin.fileno()).st_mode
    except (OSError, ValueError, AttributeError):
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISREG(mode) or stat.S_ISSOCK(mode)


def remote_command(workspace: str, argv: list[str]) -> str:
    words = " ".join(shlex.quote(a) for a in argv)
    return f"cd {shlex.quote(workspace)} 2>/dev/null; exec {words}"


def exec_over_ssh(host: str, env: str | None, accept_new_host: bool, argv: list[str], tty: bool) -> None:
    """Run argv in the environment with stdin (and a pty when tty); exits with the command's code.

    Returns (the caller runs it without stdin) for environments that are no container with sshd: the bare
    host runs its commands through devenv's connection.
    """
    from devenv.cli.common import load_host
    from devenv.cli.env_entry import env_target
    from devenv.services.backends import traits_of
    from devenv.services.session import resolve_env

    if not tty and not resolve_env(load_host(host), env).sshd:
        return
    host_profile, _, target = env_target(host, env, accept_new_host)
    if target.destination is None or (not traits_of(host_profile).containers and not tty):
        return
    ssh = list(target.ssh_argv)
    ssh.append("-tt" if tty else "-T")  # -tt: the pty was asked for, even when stdin is a pipe
    _run_ssh([*ssh, "--", target.destination, remote_command(target.workspace, argv)])
