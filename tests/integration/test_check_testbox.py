"""`devenv check` against the real test host (sshd on 127.0.0.1:2201 + dockerd, no GPU), through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from devenv.checks import host as hostchecks
from devenv.cli import main
from devenv.env import state as envstate
from devenv.remote import pool

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def fresh_pool():
    yield
    pool.close_all()


def check(*args):
    result = CliRunner().invoke(main, ["check", *args])
    assert "Traceback" not in result.output, result.output
    return result


def checks_of(result):
    report = json.loads(result.stdout)
    return report, {c["id"]: c for c in report["checks"]}


def test_testbox_cpu_env_is_ready_and_says_there_is_no_gpu(use_testhost):
    result = check("testbox", "--json")
    report, checks = checks_of(result)
    for key in ("os", "docker.daemon", "disk", "ssh.forwarding"):
        assert checks[key]["status"] == "pass", checks[key]
    # ssh is judged on what it timed: a loaded machine may time a slow round trip or shell start-up, and then the
    # warning must be the one those numbers call for (no timing is asserted here, only the judge's consistency)
    ssh, times = checks["ssh"], checks["ssh"]["details"]
    slow = (times["latency_ms"] >= hostchecks.SLOW_NETWORK_MS, times["shell_startup_ms"] >= hostchecks.SLOW_SHELL_MS)
    assert ssh["status"] == ("warn" if any(slow) else "pass"), ssh
    assert "Debian" in checks["os"]["value"]
    # the socket the host's docker CLI uses is learned, so the Docker API can reach it without a shell
    assert envstate.host_facts("testbox").get("docker_socket") == "/var/run/docker.sock"
    assert checks["nvidia.driver"]["status"] == "warn"
    assert "no NVIDIA driver" in checks["nvidia.driver"]["value"]
    assert result.exit_code == 0 and report["ok"] is True


def test_testbox_cuda_env_fails_on_the_missing_driver(use_testhost):
    result = check("testbox", "--env", "cuda", "--json")
    report, checks = checks_of(result)
    assert checks["nvidia.driver"]["status"] == "fail"
    assert "no NVIDIA driver" in checks["nvidia.driver"]["value"] and checks["nvidia.driver"]["remedy"]
    assert result.exit_code == 1 and report["ok"] is False


def test_user_without_docker_group_gets_the_usermod_hint(use_testhost):
    result = check("testbox-nodocker", "--json")
    _, checks = checks_of(result)
    assert checks["docker.access"]["status"] == "fail"
    assert "usermod -aG docker" in checks["docker.access"]["remedy"]
    assert result.exit_code == 1
    assert envstate.host_facts("testbox-nodocker").get("docker_socket") is None  # learned only where it works


@pytest.mark.parametrize("login", ["testbox", "testbox-nodocker"])
def test_the_docker_api_over_the_socket_channel_or_as_before_when_sshd_refuses_it(use_testhost, login):
    """A streamlocal channel straight to Docker's socket (no login shell on the host); where sshd will not open
    it (here: a user outside the docker group), the same dial-stdio path and the same error as without it."""
    from devenv.config import profiles
    from devenv.errors import DevenvError
    from devenv.remote.streamlocal import SocketRefused, open_unix_socket
    from devenv.remote.tunnels import transport_of
    from devenv.runtimes import docker_api

    conn = pool.get_connection(profiles.load_host(login))
    with pytest.raises(SocketRefused):
        open_unix_socket(transport_of(conn), "/nonexistent/docker.sock")
    assert conn.run("echo alive").stdout.strip() == "alive"  # a refused channel leaves the connection as it was
    if login == "testbox":
        client, info = docker_api.client_for(conn, False, "auto", socket_path="/var/run/docker.sock")
        assert info.name == "docker" and client.api.ping()
        assert client.api._custom_adapter._pool._dialer.socket_path == "/var/run/docker.sock"  # never refused
        return
    errors = []
    for socket_path in (None, "/var/run/docker.sock"):
        with pytest.raises(DevenvError) as refused:
            docker_api.client_for(conn, False, "auto", socket_path=socket_path)
        errors.append((refused.value.message, refused.value.hint))
    assert errors[0] == errors[1] and "may not use Docker" in errors[0][0] and "usermod -aG docker" in errors[0][1]


def test_unknown_host_key_is_refused_then_accepted_on_request(use_testhost):
    known_hosts = Path(use_testhost["DEVENV_KNOWN_HOSTS"])
    known_hosts.write_text("")
    refused = check("testbox")
    assert refused.exit_code == 3
    assert "SHA256:" in refused.output and "--accept-new-host" in refused.output
    pool.close_all()
    accepted = check("testbox", "--accept-new-host")
    assert accepted.exit_code == 0, accepted.output
    assert "2201" in known_hosts.read_text()


def test_changed_host_key_is_always_refused(use_testhost):
    known_hosts = Path(use_testhost["DEVENV_KNOWN_HOSTS"])
    other = "AAAAC3NzaC1lZDI1NTE5AAAAIOkZ5m3n0w3hJ8m2b6l1tqk3yq0q8m0Qe0o2Y2h7b8Xb"
    known_hosts.write_text(f"[127.0.0.1]:2201 ssh-ed25519 {other}\n")
    result = check("testbox", "--accept-new-host")
    assert result.exit_code == 3
    assert "changed" in result.output.lower() and "ssh-keygen" in result.output
    assert "-R '[127.0.0.1]:2201'" in result.output


def test_unreachable_host_is_one_message_with_a_hint(use_testhost, tmp_path):
    hosts = Path(use_testhost["DEVENV_HOME"]) / "profiles" / "hosts"
    (hosts / "gone.yaml").write_text("ssh:\n  hostname: 127.0.0.1\n  port: 1\n  connect_timeout: 3\n")
    result = check("gone")
    assert result.exit_code == 3
    assert result.output.count("Error:") == 1 and "Hint:" in result.output
    assert "127.0.0.1" in result.output


def test_check_is_one_command_round_trip_and_still_measures_the_shell(use_testhost, monkeypatch):
    """The probes go in one batch; the shell's start-up is read off that batch (no `true` runs before it)."""
    from devenv.remote.ssh import SSHConnection

    commands: list[str] = []
    original = SSHConnection.run

    def counting(self, command, **kwargs):
        commands.append(command)
        return original(self, command, **kwargs)

    monkeypatch.setattr(SSHConnection, "run", counting)
    result = check("testbox", "--json")
    _, checks = checks_of(result)
    assert len(commands) == 1, commands
    details = checks["ssh"]["details"]
    assert details["latency_ms"] is not None and details["latency_ms"] > 0
    assert details["command_ms"] is not None and details["command_ms"] >= details["latency_ms"]
    assert details["shell_startup_ms"] is not None
