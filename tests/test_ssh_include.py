"""`devenv ssh-config install|uninstall`: one line at the top of the user's file, undone byte for byte."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from click.testing import CliRunner

from devenv.cli import main
from devenv.config import ssh_include

USER_CONFIG = (b"# my config \xe2\x9c\x93\r\nHost work\n  HostName 10.0.0.1\n\tUser me\n\n"
               b"Match host *.lab\n  ForwardAgent no")  # CRLF, a tab, UTF-8 and no final newline: all kept


@pytest.fixture
def homes(tmp_path, monkeypatch):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("DEVENV_HOME", str(tmp_path / "devenv home"))  # a space: the Include is quoted
    monkeypatch.delenv("DEVENV_SSH_CONFIG", raising=False)
    devenv_cfg = tmp_path / "devenv home" / "ssh" / "config"
    devenv_cfg.parent.mkdir(parents=True)
    devenv_cfg.write_text("Host devenv-box-cuda\n  HostName 127.0.0.1\n  Port 49222\n")
    return home / ".ssh" / "config", devenv_cfg


def run(*args: str, stdin: str | None = None):
    return CliRunner().invoke(main, ["ssh-config", *args], input=stdin)


def test_install_adds_exactly_one_line_at_the_top_and_uninstall_restores_every_byte(homes):
    user, devenv_cfg = homes
    user.write_bytes(USER_CONFIG)
    os.chmod(user, 0o640)
    assert run("install", "--yes").exit_code == 0
    after = user.read_bytes()
    assert after == f'Include "{devenv_cfg}"\n'.encode() + USER_CONFIG
    assert run("install", "--yes").exit_code == 0 and user.read_bytes() == after  # twice: still one line
    assert "installed" in run("show").output
    assert run("uninstall").exit_code == 0
    assert user.read_bytes() == USER_CONFIG
    assert user.stat().st_mode & 0o777 == 0o640


def test_without_consent_nothing_changes(homes):
    user, _ = homes
    user.write_bytes(USER_CONFIG)
    refused = run("install")  # not a terminal and no --yes
    assert refused.exit_code == 2 and "consent" in refused.output
    assert user.read_bytes() == USER_CONFIG


def test_a_file_devenv_created_is_removed_again(homes):
    user, devenv_cfg = homes
    assert run("install", "--yes").exit_code == 0
    assert user.read_text() == f'Include "{devenv_cfg}"\n'
    assert run("uninstall").exit_code == 0
    assert not user.exists()


def test_a_symlinked_config_stays_a_link(homes, tmp_path):
    user, _ = homes
    real = tmp_path / "dotfiles-ssh-config"
    real.write_bytes(USER_CONFIG)
    user.symlink_to(real)
    assert run("install", "--yes").exit_code == 0
    assert user.is_symlink() and real.read_bytes().startswith(b"Include ")
    assert run("uninstall").exit_code == 0
    assert user.is_symlink() and real.read_bytes() == USER_CONFIG


@pytest.mark.skipif(shutil.which("ssh") is None, reason="openssh-client is installed by testhost/setup")
def test_ssh_resolves_devenvs_entry_only_after_install(homes):
    user, _ = homes
    user.write_bytes(USER_CONFIG + b"\nHost *\n  Port 22\n")

    def resolved() -> dict[str, str]:
        out = subprocess.run(["ssh", "-F", str(user), "-G", "devenv-box-cuda"], capture_output=True, text=True,
                             check=True).stdout
        return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)

    assert resolved()["hostname"] == "devenv-box-cuda"
    run("install", "--yes")
    assert resolved()["hostname"] == "127.0.0.1" and resolved()["port"] == "49222"
    run("uninstall")
    assert resolved()["hostname"] == "devenv-box-cuda"


def test_is_at_top_tells_an_include_below_a_host_block():
    line = ssh_include.include_line(ssh_include.Path("/d/config"))
    assert ssh_include.is_at_top(line + "Host a\n", line)
    assert not ssh_include.is_at_top("Host a\n" + line, line)
