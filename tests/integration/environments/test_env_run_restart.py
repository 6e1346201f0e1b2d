"""A detached run in a docker environment whose container is restarted (a real `docker restart`, as a daemon
restart or a host reboot does it): the run's supervisor died with the container's processes, so the run is
`lost`, not `running` forever, and its log, kept in the workspace volume, is read whole. Waits are on the log's
line and on the container's state, bounded."""

from __future__ import annotations

import json
import time

import pytest
from env_testing import docker

pytestmark = pytest.mark.integration


def _runs(test_env) -> dict[str, dict]:
    listed = json.loads(test_env.run("runs", "testbox", "--env", test_env.name, "--json").stdout)
    return {r["id"]: r for r in listed["hosts"]["testbox"]["runs"]}


def _log(test_env, run_id: str) -> str:
    return test_env.run("logs", "testbox", "--env", test_env.name, "--run", run_id).stdout


def test_a_container_restart_makes_a_running_run_lost_with_its_log_kept(test_env):
    env = test_env.name
    test_env.run("up", "testbox", "--env", env, "--detach", "--json")
    started = test_env.run("run", "testbox", "--env", env, "--name", "survivor", "--no-follow", "--",
                           "sh", "-c", "echo before the restart; while :; do sleep 0.2; done")
    run_id = started.stdout.strip().splitlines()[-1]
    deadline = time.monotonic() + 120
    while "before the restart" not in _log(test_env, run_id):
        assert time.monotonic() < deadline, "the run's first line never came"
    assert _runs(test_env)[run_id]["state"] == "running"

    restarted = docker("restart", "-t", "1", test_env.container)
    assert restarted.returncode == 0, restarted.stderr
    deadline = time.monotonic() + 120
    while test_env.state() != "running":
        assert time.monotonic() < deadline, f"the container did not come back: {test_env.state()}"

    row = _runs(test_env)[run_id]
    assert (row["state"], row["name"], row["exit_code"]) == ("lost", "survivor", None), row
    assert _log(test_env, run_id) == "before the restart\n"
    table = test_env.run("runs", "testbox", "--env", env).stdout
    assert run_id in table and "lost" in table, table
    # the environment takes new runs after the restart, in the same runs folder
    again = test_env.run("run", "testbox", "--env", env, "--wait", "--", "sh", "-c", "echo after; exit 6",
                         check=False)
    assert again.returncode == 6, again.stderr
    assert "after" in again.stdout
    assert _runs(test_env)[run_id]["state"] == "lost"
