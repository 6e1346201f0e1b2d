"""Autostop on the test cluster, with a window of a few seconds: the watcher runs in the environment's job (the
job's launcher starts it on the node beside Jupyter, `up --autostop` arms it through the shared file system),
holds while a detached run runs or a kernel runs a cell, and once idle ends the job itself (COMPLETED); the
workspace stays and `up` submits a new job. Every wait is on an event (the watcher's state file, the job's state),
bounded; nothing asserts a time (tests/autostop_testing.py)."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from autostop_testing import WINDOW, armed_note, busy_cell, held_through_windows, stopped_by_autostop, wait_for
from slurm_testing import live_jobs, squeue

pytestmark = pytest.mark.integration


def ok(done):
    assert done.returncode == 0, done.stderr
    return done


def up_job(cluster) -> dict:
    return json.loads(ok(cluster.run("up", cluster.host, "--detach", "--json", timeout=400)).stdout)


def arm(cluster) -> dict:
    armed = json.loads(ok(cluster.run("up", cluster.host, "--detach", "--json", "--autostop", WINDOW)).stdout)
    assert armed["action"] == "reattached" and armed_note(armed["notes"]), armed
    return armed


def ended_by_itself(cluster, key: str, job_id: str) -> None:
    """The watcher stopped it (idle for the window), the job ended COMPLETED (its Jupyter, the batch step, ended:
    not cancelled), and status says so."""
    stopped_by_autostop(key)
    wait_for("the job ended by itself", lambda: not live_jobs(cluster.job_name))
    assert [j[2] for j in squeue(f"--jobs={job_id}")] == ["COMPLETED"], squeue(f"--jobs={job_id}")
    text = ok(cluster.run("status", cluster.host)).stdout
    assert "stopped: idle 4 s" in text, text


def cleanup(cluster, key: str) -> None:
    if cluster.workspace.is_dir():
        (cluster.workspace / "go").touch(exist_ok=True)
    cluster.run("down", cluster.host, timeout=180)
    shutil.rmtree(os.path.expanduser(f"~/.devenv/autostop/{key}"), ignore_errors=True)


def test_slurm_env_holds_while_a_detached_run_runs_then_ends_its_own_job(cluster):
    key = f"{cluster.owner}-{cluster.env}"
    go = cluster.workspace / "go"
    try:
        job_id = up_job(cluster)["status"]["job_id"]
        ok(cluster.run("exec", cluster.host, "--", "sh", "-c", "echo kept > note"))
        run_id = ok(cluster.run("run", cluster.host, "--", "sh", "-c",
                                "while [ ! -e go ]; do sleep 0.2; done")).stdout.strip()

        def run_is(state: str) -> bool:
            listed = json.loads(ok(cluster.run("runs", cluster.host, "--json")).stdout)
            return any(r["id"] == run_id and r["state"] == state for r in listed["hosts"][cluster.host]["runs"])

        wait_for(f"run {run_id} running", lambda: run_is("running"))
        arm(cluster)

        # held by the run through three windows' worth of samples, the job still running
        held = held_through_windows(key, "runs")
        assert held["job_id"] == job_id
        assert [j[0] for j in live_jobs(cluster.job_name)] == [job_id]
        listed = json.loads(ok(cluster.run("status", cluster.host, "--json")).stdout)["environments"]
        mine = next(e for e in listed if e["env"] == cluster.env)
        assert mine["autostop"]["state"] == "watching", mine

        go.touch()      # the run ends: nothing holds the job any more
        ended_by_itself(cluster, key, job_id)

        again = up_job(cluster)
        assert again["action"] == "created" and again["status"]["job_id"] != job_id, again
        assert ok(cluster.run("exec", cluster.host, "--", "cat", "note")).stdout == "kept\n"
    finally:
        cleanup(cluster, key)


def test_slurm_env_holds_while_a_kernel_runs_a_cell_then_ends_its_own_job(cluster):
    """A cell executed through Jupyter's real API, in the job's kernel on the node (a loop of time.sleep until a
    file appears in the workspace), holds the job; once it is done the job ends by itself."""
    key = f"{cluster.owner}-{cluster.env}"
    go = cluster.workspace / "go"
    try:
        up = up_job(cluster)
        job_id = up["status"]["job_id"]
        # the node is this machine (slurmd node1..4 run here): its Jupyter's port is on this loopback
        url = f"http://127.0.0.1:{up['jupyter']['host_port']}/lab?token={up['jupyter']['token']}"
        with busy_cell(url, str(go), go.touch):
            arm(cluster)
            held = held_through_windows(key, "jupyter")
            assert held["held_by"] == ["jupyter"] and held["job_id"] == job_id, held
            assert [j[0] for j in live_jobs(cluster.job_name)] == [job_id]
        ended_by_itself(cluster, key, job_id)
    finally:
        cleanup(cluster, key)
