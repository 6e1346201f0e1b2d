"""No YAML to start: ssh aliases, user@host:port and @groups on the command line, `devenv hosts add`, bundled
examples that never break `status`, and one exit-code contract for every command (0 ok, 1 failed, 2 bad input,
3 cannot connect, 4 no GPU proven), against real sshds on loopback and a fresh DEVENV_HOME."""

from __future__ import annotations

import json
import os
import stat

import pytest
import yaml
from click.testing import CliRunner
from sshd_fixture import SSHD, SSHAgent, free_port, make_key

from devenv.cli import main
from devenv.config import paths
from devenv.remote import pool

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def fresh(tmp_path, monkeypatch):
    """A fresh install: empty DEVENV_HOME (isolated_home), a HOME with nothing in ~/.ssh, no agent."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    yield home
    pool.close_all()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("hosts-sshd")
    key = make_key(d / "id_ed25519")
    with SSHD(d / "sshd", authorized_keys=[key.public]) as s:
        yield s, key


def cli(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def alias_config(server, key, alias="myalias") -> None:
    s, _ = server, key
    paths.ssh_config_path().write_text(
        f"Host {alias}\n  HostName 127.0.0.1\n  Port {s.port}\n  User root\n  IdentityFile {key.path}\n")
    paths.known_hosts_path().write_text(s.known_hosts_line())


def test_check_an_ssh_alias_with_no_profile(server):
    s, key = server
    alias_config(s, key)
    r = cli("check", "myalias", "--env", "cpu", "--json")
    report = json.loads(r.stdout)
    ssh = next(c for c in report["checks"] if c["id"] == "ssh")
    assert ssh["status"] in ("pass", "warn") and ssh["details"]["latency_ms"] is not None
    assert ssh["details"]["shell_startup_ms"] is not None  # reported apart from the network round trip
    failed = any(c["status"] == "fail" for c in report["checks"])
    assert r.exit_code == (1 if failed else 0), r.output


def test_a_host_without_a_profile_gets_the_environment_that_fits_it_and_says_so(server):
    # the sshd runs on this machine: `cuda` where it has an NVIDIA GPU, else `cpu` (issue 28, point 5)
    import subprocess

    gpu = subprocess.run("nvidia-smi -L 2>/dev/null | grep -q '^GPU '", shell=True).returncode == 0
    fits, why = ("cuda", "an NVIDIA GPU answers") if gpu else ("cpu", "no NVIDIA GPU answers")
    s, key = server
    alias_config(s, key)
    r = CliRunner().invoke(main, ["check", "myalias"])
    assert f"Checking myalias for environment '{fits}'" in r.output, r.output
    assert f"myalias has no host profile and {why} nvidia-smi: environment '{fits}'" in r.output
    named = CliRunner().invoke(main, ["check", "myalias", "--env", "cuda"])
    assert "for environment 'cuda'" in named.output and "no host profile" not in named.output


def test_check_user_at_host_port_with_the_agents_key(server, fresh, tmp_path, monkeypatch):
    s, key = server
    agent = SSHAgent(tmp_path / "agent").__enter__()
    agent.add(key.path)
    monkeypatch.setenv("SSH_AUTH_SOCK", str(agent.socket_path))
    r = cli("check", f"root@127.0.0.1:{s.port}", "--env", "cpu", "--accept-new-host", "--json")
    assert r.exit_code in (0, 1), r.output
    assert json.loads(r.stdout)["host"] == f"root@127.0.0.1:{s.port}"
    assert f"[127.0.0.1]:{s.port}" in paths.known_hosts_path().read_text()  # recorded: the user consented
    agent.__exit__(None, None, None)


def test_status_of_the_bundled_group_on_a_fresh_install():
    r = cli("status", "@lab")
    assert r.exit_code == 0, r.output
    assert "a100-box: bundled example profile" in r.stderr
    plain = cli("status", "--json")
    assert plain.exit_code == 0 or "a100-box" not in plain.output  # examples are never asked unasked


def test_hosts_add_writes_a_private_validated_profile_and_groups_work(server, fresh):
    s, key = server
    alias_config(s, key)
    r = cli("hosts", "add", "box1", "--ssh", "myalias", "--group", "mine")
    assert r.exit_code == 0, r.output
    path = paths.user_profiles_dir() / "hosts" / "box1.yaml"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert yaml.safe_load(path.read_text())["ssh"] == {"alias": "myalias"}
    assert cli("hosts", "add", "box1", "--ssh", "myalias").exit_code == 2  # exists: --force to replace
    assert cli("hosts", "add", "bad", "--ssh", "-oProxyCommand=x").exit_code == 2
    assert cli("hosts", "add", "down1", "--ssh", f"root@127.0.0.1:{free_port()}", "--group", "mine").exit_code == 0

    # one failing host does not stop the others; the exit code says a host could not be reached
    r = cli("status", "@mine", "--json")
    assert r.exit_code == 3, r.output
    out = json.loads(r.stdout)
    assert list(out["errors"]) == ["down1"] and "connection refused" in out["errors"]["down1"]
    r = cli("check", "@mine", "--env", "cpu", "--json")
    assert r.exit_code == 3, r.output
    hosts = json.loads(r.stdout)["hosts"]
    assert hosts["down1"]["exit_code"] == 3 and any(c["id"] == "ssh" for c in hosts["box1"]["checks"])
    r = cli("monitor", "@mine", "--once", "--json")
    assert r.exit_code == 3, r.output
    states = {h["host"]: h["state"] for h in json.loads(r.stdout)["hosts"]}
    assert states["box1"] in ("ok", "no-gpu") and states["down1"] == "error"


@pytest.mark.parametrize("argv", [
    ["check", "{dest}", "--env", "cpu"],
    ["status", "{dest}"],
    ["monitor", "{dest}", "--once"],
    ["sanity", "{dest}", "--no-save"],
    ["exec", "{dest}", "--", "true"],
    ["logs", "{dest}"],
    ["down", "{dest}"],
    ["jupyter", "{dest}"],
    ["up", "{dest}", "--env", "cpu"],
    ["ssh", "{dest}", "--", "true"],
    ["tunnel", "{dest}", "8888"],
    ["image", "build", "{dest}", "--env", "cpu"],
])
def test_an_unreachable_host_is_exit_code_3_in_every_command(argv):
    dest = f"root@127.0.0.1:{free_port()}"
    r = cli(*[a.format(dest=dest) for a in argv])
    assert r.exit_code == 3, r.output
    assert "connection refused" in r.output


@pytest.mark.parametrize("argv", [
    ["check", "--", "-oProxyCommand=touch /tmp/x"],
    ["status", "@no-such-group"],
    ["exec", "bad host", "--", "true"],
    ["monitor", "user@host:99999", "--once"],
])
def test_bad_host_names_are_exit_code_2(argv):
    r = cli(*argv)
    assert r.exit_code == 2, r.output


def test_a_slow_bashrc_is_shell_start_up_not_network_latency(tmp_path):
    """The round trip is an SSH keepalive (no shell); running `true` pays the login shell's start-up, which
    is reported apart, with its own hint (it used to be reported as network latency)."""
    key = make_key(tmp_path / "id")
    with SSHD(tmp_path / "sshd", authorized_keys=[key.public]) as s:
        s.bashrc.write_text("sleep 1.5\n")
        paths.ssh_config_path().write_text(
            f"Host slowshell\n  HostName 127.0.0.1\n  Port {s.port}\n  User root\n  IdentityFile {key.path}\n")
        paths.known_hosts_path().write_text(s.known_hosts_line())
        r = cli("check", "slowshell", "--env", "cpu", "--json")
    ssh = next(c for c in json.loads(r.stdout)["checks"] if c["id"] == "ssh")
    assert ssh["details"]["shell_startup_ms"] > ssh["details"]["latency_ms"]
    assert ssh["status"] == "warn" and ".bashrc" in ssh["remedy"] and "jump host" not in ssh["remedy"]
