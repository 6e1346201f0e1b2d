"""`exec` with stdin or a terminal: through the environment's own sshd with the user's OpenSSH.

Docker's exec API carries no stdin over devenv's connection; the environment's sshd does, and gives a pty on
request. The command's argv is quoted word by word, so the remote shell sees exactly the words given, and it
runs in the workspace, as `docker exec` would.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import stat
import subprocess
import sys
import tempfile
from typing import NoReturn

from devenv.errors import ConnectError


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
    from devenv.services.environments.contract import Shell
    from devenv.services.environments.registry import backend_class, known_backend
    from devenv.services.session import resolve_env

    host_profile = load_host(host)
    kind = known_backend(host_profile)
    if kind is not None and kind.shell is Shell.NONE:   # no shell there (a Slurm job): the login node runs it
        exec_through_login(host, env, accept_new_host, argv, tty)
    if not tty and not resolve_env(host_profile, env).sshd:
        return
    host_profile, _, target = env_target(host, env, accept_new_host)
    # piped stdin without a terminal on the bare host: devenv's own exec there (it sets the environment's GPUs)
    if target.destination is None or (backend_class(host_profile).shell is Shell.HOST and not tty):
        return
    run_remote(host, ssh_command(target.ssh_argv, target.destination, remote_command(target.workspace, argv), tty),
               argv)


def exec_through_login(host: str, env: str | None, accept_new_host: bool, argv: list[str], tty: bool) -> NoReturn:
    """An environment that is a scheduler job runs no sshd: the user's ssh to the login node runs the command
    the backend gives (srun in the job), so stdin, a terminal and the exit code work as in a container."""
    from devenv.cli.env_entry import keepalive_options, ssh_binary
    from devenv.remote import openssh
    from devenv.services.session import open_env

    with open_env(host, env, accept_new_host=accept_new_host) as session:
        command = session.backend.exec_command(session.env.name, argv, tty)  # type: ignore[attr-defined]
        alive = keepalive_options(session.conn)
        profile = session.host
    if profile.ssh is None:   # a login node that is this machine
        raise SystemExit(_call(["/bin/sh", "-c", command]))
    options = openssh.host_options(profile)
    run_remote(host, ssh_command((ssh_binary(), *alive, *options[:-1]), options[-1], command, tty), argv)


def ssh_command(ssh_argv: tuple[str, ...], destination: str, command: str, tty: bool) -> list[str]:
    """ssh's argv: its options (the bare host's end in `--`, ready for rsync -e), the pty flag among them,
    then one `--` and the destination."""
    options = list(ssh_argv[:-1] if ssh_argv[-1:] == ("--",) else ssh_argv)
    options.append("-tt" if tty else "-T")  # -tt: the pty was asked for, even when stdin is a pipe
    return [*options, "--", destination, command]


# what ssh says (LogLevel INFO) when a session with a pty ends normally: not a lost connection, not shown
_CLOSED = re.compile(r"^Connection to \S+ closed\.\r?\n?", re.M)
# what ssh says when a connection that was up ends under it (a keepalive timeout, the proxy or peer gone)
_LOST = ("not responding", "closed", "Broken pipe", "reset by peer", "Connection timed out during")


def run_remote(host: str, ssh: list[str], argv: list[str]) -> NoReturn:
    """Run ssh; exit with the remote command's code, or with exit 3 and a message when ssh itself failed.

    ssh exits 255 both when the connection failed or was lost and when the remote command exited 255; its own
    messages (-E) tell the two apart: a lost connection leaves one there ("Timeout, server ... not responding",
    "Connection closed by ..."), a command's exit does not. They are shown as ssh would have shown them."""
    with tempfile.TemporaryDirectory(prefix="devenv-ssh-") as folder:
        log = os.path.join(folder, "ssh.log")
        code = _call([ssh[0], "-E", log, *ssh[1:]])
        try:
            with open(log, errors="replace") as f:
                said = f.read(64 * 1024)
        except OSError:
            said = ""
    said = _CLOSED.sub("", said)  # ssh's note after a session with a pty ended as asked: no news for the user
    if said:
        sys.stderr.write(said if said.endswith("\n") else said + "\n")
    if code != 255 or not said.strip():
        raise SystemExit(code)
    last = said.strip().splitlines()[-1][:200]
    command = " ".join(argv)
    if not any(word in said for word in _LOST):
        raise ConnectError(f"ssh could not reach the environment on {host} (ssh: {last}); nothing was run",
                           f"`devenv status {host}` shows whether it is up; `devenv up {host}` repairs it")
    timed_out = "not responding" in said
    why = ("the host or the environment stopped answering SSH keepalives" if timed_out else f"ssh: {last}")
    raise ConnectError(f"the connection to {host} was lost while `{command[:60]}` ran ({why}); it may still be "
                       "running in the environment (the host cannot be asked now)",
                       f"see it with `devenv exec {host} -- ps -ef`; stop it with "
                       f"`devenv exec {host} -- pkill -xf {shlex.quote(command[:200])}`; its output from now on "
                       "is not kept")


def _call(argv: list[str]) -> int:
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C belongs to the remote command
    try:
        return subprocess.call(argv)
    finally:
        signal.signal(signal.SIGINT, previous)
