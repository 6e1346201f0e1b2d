"""`up` again and again: a running environment with the same spec is only reattached (fast); a changed spec is
shown as a diff and recreated only on confirmation, keeping the workspace."""

from __future__ import annotations

import json

import pytest
from env_testing import docker, processes_mentioning
from jupyter_client import JupyterClient

from devenv.remote.tunnels import control_dir_path

pytestmark = pytest.mark.integration


def test_up_twice_reattaches_fast_and_changes_nothing(test_env):
    env = test_env.name
    first = json.loads(test_env.run("up", "testbox", "--env", env, "--detach", "--json").stdout)
    created_id = first["status"]["container"]
    second_run = test_env.run("up", "testbox", "--env", env, "--detach", "--json")
    second = json.loads(second_run.stdout)
    assert second["action"] == "reattached"
    assert second["status"]["container"] == created_id
    assert second["status"]["ports"] == first["status"]["ports"]
    assert "Checking" not in second_run.stderr, "a reattach must not re-run the host checks"
    # how fast a reattach is, is measured in benchmarks/ (docs/benchmarks.md), not asserted: a loaded CI machine
    # would make a time limit here fail for no fault of devenv's
    assert test_env.containers() == [test_env.container]

    # Without --detach, `up` holds a tunnel and prints the URL; ending it closes the tunnel, not the environment.
    proc = test_env.popen("up", "testbox", "--env", env)
    try:
        url = next(line.split()[-1] for line in proc.stdout if "token=" in line)
        with JupyterClient(url) as jc:
            assert jc.api("/api/status").status_code == 200
    finally:
        proc.terminate()
        assert proc.wait(15) == 0
    port = url.split(":")[2].split("/")[0]
    assert not processes_mentioning(f"127.0.0.1:{port}:")
    assert not processes_mentioning(str(control_dir_path())), "the tunnels' ControlMaster outlived devenv up"
    assert test_env.state() == "running"


def test_changed_spec_shows_diff_and_recreates_only_when_confirmed(test_env):
    env = test_env.name
    first = json.loads(test_env.run("up", "testbox", "--env", env, "--detach", "--json").stdout)
    test_env.run("exec", "testbox", "--env", env, "--", "sh", "-c", "echo survives > /workspace/note")
    profile = test_env.home / "profiles" / "envs" / f"{env}.yaml"
    profile.write_text(profile.read_text().replace("shm_size: 1g", "shm_size: 2g"))

    # Not a terminal and no --yes: the diff is shown, nothing is touched, the exit code says so.
    refused = test_env.run("up", "testbox", "--env", env, "--detach", check=False)
    assert refused.returncode == 2, refused.stderr  # a step that needs a yes, refused without a terminal (README)
    assert "shm_size: 1g -> 2g" in refused.stderr and "--yes" in refused.stderr
    assert docker("inspect", "-f", "{{.Id}}", test_env.container).stdout.strip() == first["status"]["container"]

    recreated = json.loads(test_env.run("up", "testbox", "--env", env, "--detach", "--yes", "--json").stdout)
    assert recreated["action"] == "recreated"
    assert recreated["status"]["container"] != first["status"]["container"]
    shm = docker("inspect", "-f", "{{.HostConfig.ShmSize}}", test_env.container).stdout.strip()
    assert shm == str(2 * 1024 ** 3)
    kept = test_env.run("exec", "testbox", "--env", env, "--", "cat", "/workspace/note")
    assert kept.stdout == "survives\n"
    assert test_env.containers() == [test_env.container]
