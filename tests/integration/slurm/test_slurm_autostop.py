"""Autostop on the test cluster, with a window of a few seconds: the watcher runs in the environment's job (the
job's launcher starts it on the node beside Jupyter, `up --autostop` arms it through the shared file system),
holds while a detached run runs, and once idle ends the job itself; the workspace stays and `up` submits a new
job. Every wait is on an event (the watcher's state file, the job's state), bounded; nothing asserts a time."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from slurm_testing import live_jobs

pytestmark = pytest.mark.integration

WINDOW = "4s"
BOUND_S = 240


def watcher_state(key: str) -> dict:
    try:
        return json.loads(Path(os.path.expanduser(f"~/.devenv/autostop/{key}/state.json")).read_text())
    except (OSError, ValueError):
        return {}


def wait_for(what: str, ready, bound: float = BOUND_S):
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        got = ready()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def ok(done):
    assert done.returncode == 0, done.stderr
    return done


def test_slurm_env_holds_while_a_detached_run_runs_then_ends_its_own_job(cluster):
    key = f"{cluster.owner}-{cluster.env}"
    go = cluster.workspace / "go"
    try:
        up = json.loads(ok(cluster.run("up", cluster.host, "--detach", "--json", timeout=400)).stdout)
        job_id = up["status"]["job_id"]
        ok(cluster.run("exec", cluster.host, "--", "sh", "-c", "echo kept > note"))
        run_id = ok(cluster.run("run", cluster.host, "--", "sh", "-c",
                                "while [ ! -e go ]; do sleep 0.2; done")).stdout.strip()

        def run_is(state: str) -> bool:
            listed = json.loads(ok(cluster.run("runs", cluster.host, "--json")).stdout)
            return any(r["id"] == run_id and r["state"] == state for r in listed["hosts"][cluster.host]["runs"])

        wait_for(f"run {run_id} running", lambda: run_is("running"))
        armed = json.loads(ok(cluster.run("up", cluster.host, "--detach", "--json", "--autostop", WINDOW)).stdout)
        assert armed["action"] == "reattached"
        assert any(n.startswith("autostop: stop after 4 s idle") for n in armed["notes"]), armed["notes"]

        # held by the run through three windows' worth of samples, the job still running
        first = wait_for("a sample held by the run", lambda: (s := watcher_state(key)).get("samples")
                         and "runs" in s.get("held_by", []) and s)
        assert first["job_id"] == job_id
        needed = first["samples"] + 3 * int(first["window_s"] / first["interval_s"] + 1)
        held = wait_for(f"{needed} samples", lambda: (s := watcher_state(key)).get("samples", 0) >= needed and s)
        assert held["state"] == "watching" and "runs" in held["held_by"], held
        assert [j[0] for j in live_jobs(cluster.job_name)] == [job_id]
        listed = json.loads(ok(cluster.run("status", cluster.host, "--json")).stdout)["environments"]
        mine = next(e for e in listed if e["env"] == cluster.env)
        assert mine["autostop"]["state"] == "watching", mine

        go.touch()      # the run ends: nothing holds the job any more
        state = wait_for("the watcher's last word", lambda: (s := watcher_state(key)).get("state") == "stopped"
                         and s)
        assert state["reason"] == "idle 4 s"
        wait_for("the job ended by itself", lambda: not live_jobs(cluster.job_name))
        text = ok(cluster.run("status", cluster.host)).stdout
        assert "stopped: idle 4 s" in text, text

        again = json.loads(ok(cluster.run("up", cluster.host, "--detach", "--json", timeout=400)).stdout)
        assert again["action"] == "created" and again["status"]["job_id"] != job_id, again
        assert ok(cluster.run("exec", cluster.host, "--", "cat", "note")).stdout == "kept\n"
    finally:
        if cluster.workspace.is_dir():
            go.touch(exist_ok=True)
        cluster.run("down", cluster.host, timeout=180)
        shutil.rmtree(os.path.expanduser(f"~/.devenv/autostop/{key}"), ignore_errors=True)
