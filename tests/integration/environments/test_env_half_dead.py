"""A running environment with a dead service inside (issue 14): `status` says which one does not answer, and
`up` repairs it instead of waiting and failing: sshd alone is started again (Jupyter and its kernels live on),
a hung Jupyter gets the container restarted (the workspace is kept). Both probed through the published ports
over devenv's SSH connection, as `up` waits for them."""

from __future__ import annotations

import json
import time

import pytest
from env_testing import docker

from devenv.services.environments.docker import backend as provision

pytestmark = pytest.mark.integration


def _status(test_env) -> dict:
    out = json.loads(test_env.run("status", "testbox", "--json").stdout)
    return next(e for e in out["environments"] if e["env"] == test_env.name)


def _started_at(container: str) -> str:
    return docker("inspect", "-f", "{{.State.StartedAt}}", container).stdout.strip()


def test_status_names_the_dead_service_and_up_repairs_it(test_env):
    env = test_env.name
    up = json.loads(test_env.run("up", "testbox", "--env", env, "--detach", "--json").stdout)
    container = up["status"]["container"]
    answers = _status(test_env)["answers"]
    assert answers["jupyter"].startswith("ok: jupyter-server") and answers["sshd"].startswith("ok: SSH-2.0-")
    assert docker("exec", container, "sh", "-c", "echo kept > /workspace/mark").returncode == 0

    # sshd dead for good: its supervisor (the entrypoint's subshell) first, then sshd itself
    for pattern in ("^/bin/sh /usr/local/bin/devenv-entrypoint", "^sshd"):
        killed = docker("exec", container, "pkill", "-KILL", "-f", pattern)
        assert killed.returncode == 0, (pattern, killed.stderr)
    # `up` gives a container younger than STARTING_S time to start its services: let this one be older
    first_start = _started_at(container)
    time.sleep(max(0.0, provision.STARTING_S + 1 - (time.time() - _epoch(first_start))))

    shown = _status(test_env)
    assert shown["state"] == "running" and shown["answers"]["jupyter"].startswith("ok")
    assert shown["answers"]["sshd"].startswith("down"), shown["answers"]
    text = test_env.run("status", "testbox")
    assert "sshd not answering" in text.stdout
    assert f"devenv up testbox --env {env}` repairs it" in text.stderr

    repaired = json.loads(test_env.run("up", "testbox", "--env", env, "--detach", "--json").stdout)
    assert repaired["action"] == "repaired", repaired
    assert any("sshd" in note and "started it again" in note for note in repaired["notes"]), repaired["notes"]
    assert _started_at(container) == first_start  # the container (and Jupyter in it) was not restarted
    assert all(said.startswith("ok") for said in _status(test_env)["answers"].values())
    shell = test_env.run("exec", "testbox", "--env", env, "--", "cat", "/workspace/mark")
    assert shell.stdout.strip() == "kept"

    # Jupyter hung: the process is there, the port accepts, nothing answers
    assert docker("exec", container, "pkill", "-STOP", "-f", "jupyter-lab").returncode == 0
    shown = _status(test_env)
    assert shown["answers"]["jupyter"].startswith("down") and shown["answers"]["sshd"].startswith("ok")
    assert "jupyter not answering" in test_env.run("status", "testbox").stdout

    repaired = json.loads(test_env.run("up", "testbox", "--env", env, "--detach", "--json").stdout)
    assert repaired["action"] == "repaired" and repaired["status"]["container"] == container
    assert any("restarted its container" in note for note in repaired["notes"]), repaired["notes"]
    assert _started_at(container) != first_start
    assert all(said.startswith("ok") for said in _status(test_env)["answers"].values())
    assert docker("exec", container, "cat", "/workspace/mark").stdout.strip() == "kept"


def _epoch(started_at: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(started_at[:26].rstrip("Z") + "+00:00").timestamp()
