"""`exec` with stdin or a terminal: the backend's exec_entry run by the user's OpenSSH.

devenv's own connection carries no stdin to a container (Docker's exec API) and gives no terminal; the user's
ssh does both, to the host (the bare host, a Slurm login node whose srun passes them on) or to the
environment's own sshd. The backend says which and gives the command line, argv quoted word by word, so the
remote shell sees exactly the words given, run in the workspace.
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


def exec_over_ssh(host: str, env: str | None, accept_new_host: bool, argv: list[str], tty: bool) -> None:
    """Run argv in the environment with stdin (and a pty when tty) as its backend's exec_entry says; exits with
    the command's code. Returns (the caller runs it without stdin) where no stdin can reach the environment."""
    from devenv.cli.env_entry import keepalive_options, session_target, ssh_binary
    from devenv.remote import openssh
    from devenv.services.session import open_env

    with open_env(host, env, accept_new_host=accept_new_host) as session:
        entry = session.backend.exec_entry(session.env, argv, tty)
        if entry is None:
            return
        if entry.on_host:
            profile = session.host
            ssh_argv: tuple[str, ...] = ()
            if profile.ssh is not None:   # else a host that is this machine: its own shell runs it
                options = openssh.host_options(profile)
                ssh_argv, destination = (ssh_binary(), *keepalive_options(session.conn), *options[:-1]), options[-1]
        else:   # the environment's own sshd, through its ssh entry
            target = session_target(session)
            ssh_argv, destination = target.ssh_argv, target.destination or ""
    if not ssh_argv:
        raise SystemExit(_call(["/bin/sh", "-c", entry.command]))
    run_remote(host, ssh_command(ssh_argv, destination, entry.command, tty), argv)


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
        if "-tt" not in argv:
            return subprocess.call(argv)
        # With a pty the command's stderr comes back on ssh's stdout, so ssh's own stderr holds only ssh's words;
        # its "Connection to HOST closed." after a session that ended as asked is written there directly (not
        # to -E's log), and is dropped here. Everything else ssh says is passed on as it comes.
        proc = subprocess.Popen(argv, stderr=subprocess.PIPE)
        assert proc.stderr is not None
        for line in proc.stderr:
            text = line.decode(errors="replace")
            if not _CLOSED.fullmatch(text):
                sys.stderr.write(text)
                sys.stderr.flush()
        return proc.wait()
    finally:
        signal.signal(signal.SIGINT, previous)
