"""`exec` through the user's OpenSSH (cli/exec_ssh.py), with a real sshd: ssh's exit 255 is the remote command's
own code when ssh said nothing, and exit 3 with devenv's message when ssh failed; the bare host's options (which
end in `--` for rsync -e) get the pty flag before one `--`, never after it (issue 14)."""

from __future__ import annotations

import shutil

import pytest
from sshd_fixture import SSHD, free_port, make_key

from devenv.cli.exec_ssh import run_remote, ssh_command
from devenv.errors import ConnectError

pytestmark = pytest.mark.skipif(shutil.which("ssh") is None, reason="needs OpenSSH's ssh")


def _ssh(tmp_path, key, port: int) -> list[str]:
    return ["ssh", "-F", "/dev/null", "-i", str(key.path), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
            "-o", f"UserKnownHostsFile={tmp_path / 'kh'}", "-o", "StrictHostKeyChecking=yes", "-p", str(port),
            "-l", "root"]


def test_the_bare_hosts_options_get_the_pty_flag_before_their_double_dash():
    argv = ssh_command(("ssh", "-o", "ServerAliveInterval=5", "-l", "me", "--"), "box", "true", tty=True)
    assert argv == ["ssh", "-o", "ServerAliveInterval=5", "-l", "me", "-tt", "--", "box", "true"]
    argv = ssh_command(("ssh", "-F", "/c"), "devenv-box-cpu", "true", tty=False)
    assert argv == ["ssh", "-F", "/c", "-T", "--", "devenv-box-cpu", "true"]


def test_a_remote_commands_exit_255_is_its_own_code_and_a_failed_ssh_is_exit_3(tmp_path):
    key = make_key(tmp_path / "id_ed25519")
    with SSHD(tmp_path / "sshd", authorized_keys=[key.public]) as server:
        (tmp_path / "kh").write_text(server.known_hosts_line())
        ssh = _ssh(tmp_path, key, server.port)
        with pytest.raises(SystemExit) as exited:
            run_remote("box", ssh_command(tuple(ssh), "127.0.0.1", "exit 255", tty=False), ["sh"])
        assert exited.value.code == 255
        with pytest.raises(SystemExit) as exited:
            run_remote("box", ssh_command(tuple(ssh), "127.0.0.1", "exit 7", tty=False), ["sh"])
        assert exited.value.code == 7
    with pytest.raises(ConnectError) as failed:  # nobody listens: ssh's 255 is no command's code
        run_remote("box", ssh_command(tuple(_ssh(tmp_path, key, free_port())), "127.0.0.1", "true", tty=False),
                   ["true"])
    assert failed.value.exit_code == 3 and "could not reach the environment on box" in failed.value.message
    assert "refused" in failed.value.message
