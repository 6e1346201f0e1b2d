"""Autostop on the test cluster, with a window of a few seconds: the watcher runs in the environment's job (the
job's launcher starts it on the node beside Jupyter, `up --autostop` arms it through the shared file system),
holds while a `devenv exec` session is open, a detached run runs or a kernel runs a cell, and once idle ends the
job itself (COMPLETED); the workspace stays and `up` submits a new job. Every wait is on an event (the watcher's
state file, the job's state, a line), bounded; nothing asserts a time (tests/autostop_testing.py)."""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from autostop_testing import BOUND_S, WINDOW, armed_note, busy_cell, held_through_windows, stopped_by_autostop, wait_for
from slurm_testing import REPO, live_jobs, squeue

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


def start_session(cluster, errors) -> subprocess.Popen:
    """An interactive `devenv exec` into the job (an `srun --overlap` step on its node) whose command waits for a
    line on its stdin: returns once the command in the step said it is there (bounded)."""
    proc = subprocess.Popen([sys.executable, "-m", "devenv", "exec", cluster.host, "--", "sh", "-c",
                             "echo ready; read line; echo bye"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=errors, text=True, env=cluster.environ, cwd=REPO)
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], BOUND_S)
    line = proc.stdout.readline() if ready else ""
    assert line == "ready\n", (line, proc.poll())
    return proc


def end_session(proc: subprocess.Popen) -> str:
    """A line to the session's command: it ends, and so does `devenv exec` (bounded); what it said last."""
    if proc.poll() is None:
        try:
            out, _ = proc.communicate("done\n", timeout=BOUND_S)
            return out
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)
    return ""


def read_back(file) -> str:
    file.seek(0)
    return file.read()


def watcher_log(cluster, job_id: str) -> str:
    """The in-job watcher's log (what held the job, each time that changed), for a failure's message."""
    try:
        return (cluster_folder(cluster) / f"autostop-{job_id}.log").read_text()[-4000:]
    except OSError as exc:
        return f"(no log: {exc})"


def cluster_folder(cluster) -> Path:
    return Path(os.path.expanduser(f"~/.devenv/envs/{cluster.owner}-{cluster.env}"))


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


def test_slurm_env_holds_while_an_exec_session_is_open_then_ends_its_own_job(cluster, tmp_path):
    """An interactive `devenv exec` (an `srun --overlap` step of the job, its command waiting on its stdin) holds
    the job, armed by an `up` that reattaches while it is open; once it ended a detached run holds it, and once
    the run is done the job ends by itself. (Before issue 24's fix the watcher found no session here: Slurm
    22.05 cuts slurmstepd's title, "slurmstepd: [368.0", and the job was ended under the open session.)"""
    key = f"{cluster.owner}-{cluster.env}"
    go = cluster.workspace / "go"
    session = None
    with open(tmp_path / "exec.err", "w+") as errors:
        try:
            job_id = up_job(cluster)["status"]["job_id"]
            session = start_session(cluster, errors)
            arm(cluster)
            try:
                held = held_through_windows(key, "sessions")
            except AssertionError as exc:
                raise AssertionError(f"{exc}\nthe watcher's log:\n{watcher_log(cluster, job_id)}") from exc
            assert held["job_id"] == job_id and held["signals"]["sessions"]["said"] == "1 open", held
            assert [j[0] for j in live_jobs(cluster.job_name)] == [job_id]

            run_id = ok(cluster.run("run", cluster.host, "--", "sh", "-c",
                                    "while [ ! -e go ]; do sleep 0.2; done")).stdout.strip()
            wait_for(f"run {run_id} running", lambda: any(
                r["id"] == run_id and r["state"] == "running" for r in
                json.loads(ok(cluster.run("runs", cluster.host, "--json")).stdout)["hosts"][cluster.host]["runs"]))
            assert end_session(session) == "bye\n" and session.returncode == 0, read_back(errors)
            held = held_through_windows(key, "runs")
            assert held["held_by"] == ["runs"] and held["signals"]["sessions"]["said"] == "none", held

            go.touch()      # the run ends: nothing holds the job any more
            ended_by_itself(cluster, key, job_id)
            log = watcher_log(cluster, job_id)
            assert "autostop: held by sessions (1 open)" in log and "autostop: held by runs" in log, log
        finally:
            if session is not None:
                end_session(session)
            cleanup(cluster, key)
