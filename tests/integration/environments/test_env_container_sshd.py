"""The environment's sshd (issue 14): it admits only the environment's user, and it is supervised: killed, it
comes back, so the environment is never left half-dead with Jupyter up and no shell."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from env_testing import docker

from devenv.remote.openssh import env_alias

pytestmark = pytest.mark.integration


def _ssh(config: str, alias: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ssh", "-F", config, "-o", "BatchMode=yes", *args, "--", alias, "echo in"],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def test_sshd_admits_only_root_and_comes_back_when_killed(test_env):
    env = test_env.name
    status = json.loads(test_env.run("up", "testbox", "--env", env, "--detach", "--json").stdout)["status"]
    shown = test_env.run("ssh", "testbox", "--env", env, "--config").stdout
    config = next(line for line in shown.splitlines() if line.startswith("Include ")).split(" ", 1)[1]
    alias = env_alias("testbox", env)  # the env's "-" doubled (issue 14: aliases name one pair)
    assert _ssh(config, alias).stdout.strip() == "in"
    for account in ("nobody", "daemon"):
        other = _ssh(config, alias, "-l", account)
        assert other.returncode == 255 and "Permission denied" in other.stderr, (account, other.stderr)

    container = status["container"]
    killed = docker("exec", container, "pkill", "-KILL", "-x", "sshd")
    assert killed.returncode == 0, killed.stderr
    deadline = time.monotonic() + 30  # bounded wait for the supervisor, not a timing assert
    while time.monotonic() < deadline:
        probe = docker("exec", container, "devenv-ready", "sshd")
        if probe.returncode == 0:
            break
        time.sleep(0.5)
    assert probe.returncode == 0, probe.stdout
    assert _ssh(config, alias).stdout.strip() == "in"
    assert "sshd exited; restarting it" in docker("logs", container).stderr
