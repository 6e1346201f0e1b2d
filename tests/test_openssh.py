"""OpenSSH command lines and config entries (L0): strict host keys always, through the host like ProxyJump."""

from __future__ import annotations

from pathlib import Path

from devenv.config.profiles import HostProfile, SSHTarget
from devenv.remote import openssh


def host(**ssh) -> HostProfile:
    return HostProfile(name="box", source="test", ssh=SSHTarget(**ssh))


def test_alias_hosts_use_the_same_config_and_known_hosts_as_devenv(isolated_home):
    (isolated_home / "ssh_config").write_text("Host gpu-box\n  HostName 10.0.0.7\n")
    argv = openssh.host_options(host(alias="gpu-box", connect_timeout=7))
    assert argv[:2] == ["-F", str(isolated_home / "ssh_config")]
    assert f"UserKnownHostsFile={isolated_home / 'known_hosts'}" in argv
    assert "StrictHostKeyChecking=yes" in argv and "ConnectTimeout=7" in argv
    assert argv[-2:] == ["--", "gpu-box"]


def test_explicit_targets_carry_user_port_identity_and_jumps(monkeypatch):
    monkeypatch.delenv("DEVENV_SSH_CONFIG")
    monkeypatch.delenv("DEVENV_KNOWN_HOSTS")
    argv = openssh.host_options(host(hostname="10.0.0.5", user="me", port=2200, identity_file="/k/id",
                                      proxy_jump=("bastion", "me@hop:22")))
    assert "-F" not in argv and not any(a.startswith("UserKnownHostsFile") for a in argv)
    assert argv == ["-o", "StrictHostKeyChecking=yes", "-l", "me", "-p", "2200", "-i", "/k/id",
                    "-J", "bastion,me@hop:22", "--", "10.0.0.5"]


def test_env_entry_pins_the_environment_key_and_jumps_through_the_host():
    entry = openssh.env_config_entry("devenv-box-cpu", host(alias="box"), 32768, Path("/c/id"), Path("/c/kh"))
    assert "Host devenv-box-cpu\n" in entry and "Port 32768" in entry and "HostName 127.0.0.1" in entry
    assert "HostKeyAlias devenv-box-cpu" in entry and "StrictHostKeyChecking yes" in entry
    assert "IdentitiesOnly yes" in entry and "IdentityFile /c/id" in entry
    proxy = next(line for line in entry.splitlines() if "ProxyCommand" in line)
    assert proxy.endswith("-W %h:%p -- box")
    local = openssh.env_config_entry("devenv-local-cpu", HostProfile(name="local", source="t", local=True),
                                     2222, Path("/c/id"), Path("/c/kh"))
    assert "ProxyCommand" not in local


def test_blocks_and_known_hosts_are_replaced_not_duplicated():
    text = "Host other\n  Port 1\n\nHost devenv-box-cpu\n  Port 2\n"
    new = openssh.replace_block(text, "devenv-box-cpu", "Host devenv-box-cpu\n  Port 3\n")
    assert new.count("Host devenv-box-cpu") == 1 and "Port 3" in new and "Port 2" not in new and "Port 1" in new
    new_key = "AAAAC3NzaC1lZDI1NTE5AAAAINEW"
    kh = openssh.replace_known_host("devenv-box-cpu ssh-ed25519 OLD\nother ssh-rsa X\n", "devenv-box-cpu",
                                    openssh.known_hosts_line("devenv-box-cpu", f"ssh-ed25519 {new_key}"))
    assert kh == f"other ssh-rsa X\ndevenv-box-cpu ssh-ed25519 {new_key}\n"


def test_a_devenv_ssh_config_not_written_yet_is_read_as_empty_by_ssh_too(monkeypatch, tmp_path):
    """DEVENV_SSH_CONFIG names the config devenv reads in place of ~/.ssh/config; before anything wrote it, devenv
    reads it as empty, and so must the user's ssh that exec runs (ssh refuses a missing -F file: exec on a bare
    host failed with "Can't open user config file")."""
    monkeypatch.setenv("DEVENV_SSH_CONFIG", str(tmp_path / "ssh_config"))
    options, _ = openssh.host_argv(host(hostname="10.0.0.7", user="me"))
    assert options[options.index("-F") + 1] == "/dev/null"
    (tmp_path / "ssh_config").write_text("Host other\n")
    options, _ = openssh.host_argv(host(hostname="10.0.0.7", user="me"))
    assert options[options.index("-F") + 1] == str(tmp_path / "ssh_config")
