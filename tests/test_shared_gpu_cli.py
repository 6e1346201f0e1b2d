"""Shared GPUs end to end through the CLI, with hardware answers replayed (no GPU here), said honestly:
- nvidia-smi is tests/replay/nvidia-smi: real H200 recordings, held at an idle or a busy tick (REPLAY_TICK), with
  compute processes from a file (REPLAY_APPS) that names REAL processes of this machine (a `sleep` standing in
  for another user's job, and the sanity run itself), so users, cgroups and ancestry are read for real;
- the sanity "program" is tests/replay/sanity-python: the JSON lines of a real quick run recorded on an H200
  (tests/fixtures/sanity/h200-quick.jsonl), printed by a live process whose pid the run reports.
What is real: the CLI, the host profile, the sampling script run by the shell, ps and /proc, the verdict.
What is recorded: every number nvidia-smi and the GPU gave."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from click.testing import CliRunner
from monitor_helpers import REPLAY_DIR

from devenv.cli import main

pytestmark = pytest.mark.timeout(120)
UUID0 = "GPU-35c64b04-2d7b-9f48-2883-3f9d4b9d7f59"   # GPU 0 of the replayed stream
BUSY_TICK, IDLE_TICK = "20", "5"


@pytest.fixture
def other_job():
    """A real process on this machine standing in for someone else's job on GPU 0."""
    proc = subprocess.Popen(["sleep", "300"])
    yield proc
    proc.kill()
    proc.wait()


@pytest.fixture
def gpu_box(isolated_home, monkeypatch, tmp_path):
    hosts = isolated_home / "profiles" / "hosts"
    hosts.mkdir(parents=True)
    (hosts / "gpu-box.yaml").write_text(
        f"description: this machine, bare host runtime, replayed GPU\nlocal: true\nruntime: host\n"
        f"python: {REPLAY_DIR / 'sanity-python'}\ndefault_env: cuda\n")
    apps = tmp_path / "apps.csv"
    apps.write_text("")
    monkeypatch.setenv("PATH", f"{REPLAY_DIR}:{os.environ['PATH']}")
    monkeypatch.setenv("REPLAY_APPS", str(apps))
    monkeypatch.setenv("REPLAY_APPS_LIVE", "1")           # a job that ends leaves the list
    monkeypatch.setenv("REPLAY_SELF_APPS", str(apps))   # the run itself shows on GPU 0 too
    monkeypatch.setenv("REPLAY_GPUS", "1")
    return apps


def on_gpu0(apps, proc, mib: int = 1130) -> None:
    with apps.open("a") as f:
        f.write(f"{proc.pid}, python3, {mib}, {UUID0}\n")


def test_busy_gpu_is_busy_not_broken_and_exits_5(gpu_box, other_job, monkeypatch):
    monkeypatch.setenv("REPLAY_TICK", BUSY_TICK)
    on_gpu0(gpu_box, other_job)
    done = CliRunner().invoke(main, ["sanity", "gpu-box", "--no-save"])
    assert done.exit_code == 5, done.output
    user = subprocess.run(["ps", "-o", "user=", "-p", str(other_job.pid)], capture_output=True,
                          text=True).stdout.strip()
    assert f"BUSY  gpu-box: GPU 0 was shared with pid {other_job.pid} ({user}, python3, 1.1 GiB, 99% util): " \
           "speed not judged" in done.output
    assert "BUSY  matmul bf16: rate" in done.output and "measured, not judged" in done.output
    assert "PASS  matmul bf16: accuracy" in done.output  # correctness still judged
    assert "FAIL" not in done.output


def test_the_runs_own_process_does_not_make_it_busy(gpu_box, monkeypatch, tmp_path):
    tick = tmp_path / "tick"
    tick.write_text(IDLE_TICK)  # idle before the run; busy (with the run alone) once it starts
    monkeypatch.setenv("REPLAY_TICK_FILE", str(tick))
    monkeypatch.setenv("REPLAY_SELF_TICK", BUSY_TICK)
    done = CliRunner().invoke(main, ["sanity", "gpu-box", "--no-save", "--json"])
    body = json.loads(done.stdout)
    assert done.exit_code == 0, done.output
    assert body["verdict"]["status"] == "pass" and body["verdict"]["shared"] == []
    assert body["sharing"]["others"] == [] and body["sharing"]["run_pid"] > 1


def test_allow_busy_judges_anyway_and_says_so(gpu_box, other_job, monkeypatch):
    monkeypatch.setenv("REPLAY_TICK", BUSY_TICK)
    on_gpu0(gpu_box, other_job)
    done = CliRunner().invoke(main, ["sanity", "gpu-box", "--no-save", "--allow-busy", "--json"])
    verdict = json.loads(done.stdout)["verdict"]
    assert done.exit_code == 0, done.output
    assert verdict["status"] == "pass" and verdict["allow_busy"] is True
    assert f"judged although GPU 0 was shared with pid {other_job.pid}" in verdict["summary"]
    note = next(c for c in verdict["checks"] if c["name"] == "shared GPU")
    assert "judged anyway (--allow-busy)" in note["reason"]


def test_wait_idle_gives_up_on_a_gpu_that_stays_busy_with_exit_5(gpu_box, other_job, monkeypatch):
    monkeypatch.setenv("REPLAY_TICK", BUSY_TICK)
    on_gpu0(gpu_box, other_job)
    done = CliRunner().invoke(main, ["sanity", "gpu-box", "--no-save", "--wait-idle", "1"])
    assert done.exit_code == 5, done.output
    assert "waiting for free GPUs (0 of 1 s)" in done.output
    assert "Error: still busy after waiting" in done.output and f"pid {other_job.pid}" in done.output
    assert "Hint: wait longer (`--wait-idle SECONDS`)" in done.output


def test_wait_idle_waits_for_a_job_that_ends_then_judges(gpu_box, monkeypatch, tmp_path):
    from devenv.services import gpu_occupancy

    monkeypatch.setenv("REPLAY_TICK", IDLE_TICK)
    asked = tmp_path / "asked"   # the replay notes each nvidia-smi it answers
    monkeypatch.setenv("REPLAY_COUNT_FILE", str(asked))
    monkeypatch.setattr(gpu_occupancy, "WAIT_STEP_S", 0.2)   # the looks' pace (2 s): the job's end is seen soon
    # someone's job that holds GPU 0 while it lives, and ends once the wait has looked at the GPUs' processes
    # twice: the first look surely saw it busy
    job = subprocess.Popen(["sh", "-c", f'until [ "$(grep -c compute-apps {asked} 2>/dev/null)" -ge 2 ]; '
                                        "do sleep 0.05; done"])
    try:
        on_gpu0(gpu_box, job)
        done = CliRunner().invoke(main, ["sanity", "gpu-box", "--no-save", "--wait-idle", "120"])
    finally:
        job.kill()
        job.wait()
    assert done.exit_code == 0, done.output
    assert f"waiting for free GPUs (0 of 120 s): GPU 0 is busy with pid {job.pid}" in done.output
    assert "GPU 0 free: starting" in done.output and "PASS  gpu-box: NVIDIA H200" in done.output


def test_wait_idle_on_a_free_gpu_starts_at_once(gpu_box, monkeypatch):
    monkeypatch.setenv("REPLAY_TICK", IDLE_TICK)
    done = CliRunner().invoke(main, ["sanity", "gpu-box", "--no-save", "--wait-idle", "60"])
    assert done.exit_code == 0, done.output
    assert "GPU 0 free: starting" in done.output and "PASS  gpu-box: NVIDIA H200" in done.output


def test_gpus_count_picks_a_free_gpu_and_passes_it_to_the_run(gpu_box, other_job, monkeypatch):
    monkeypatch.setenv("REPLAY_TICK", IDLE_TICK)
    monkeypatch.setenv("REPLAY_GPUS", "2")
    with gpu_box.open("a") as f:  # someone holds GPU 0 (idle tick: it computes nothing, it is still theirs)
        f.write(f"{other_job.pid}, python3, 1130, {UUID0}\n")
    monkeypatch.setenv("REPLAY_SELF_UUID", UUID0[:-2] + "01")  # the run lands on GPU 1, where it was sent
    done = CliRunner().invoke(main, ["sanity", "gpu-box", "--no-save", "--gpus", "1", "--json"])
    body = json.loads(done.stdout)
    assert done.exit_code == 0, done.output
    assert body["sharing"]["gpu_uuids"] == [UUID0[:-2] + "01"]
    assert body["verdict"]["status"] == "pass"


def test_gpus_count_larger_than_the_free_ones_is_refused_naming_the_busy(gpu_box, other_job, monkeypatch):
    monkeypatch.setenv("REPLAY_TICK", IDLE_TICK)
    on_gpu0(gpu_box, other_job)
    done = CliRunner().invoke(main, ["sanity", "gpu-box", "--no-save", "--gpus", "1"])
    assert done.exit_code == 1, done.output
    assert f"Error: 1 free GPU asked for, but only 0 of 1 on gpu-box are free: GPU 0 is busy with pid " \
           f"{other_job.pid}" in done.output
    assert "--allow-busy" in done.output


def test_bad_gpus_value_is_bad_input():
    done = CliRunner().invoke(main, ["sanity", "x", "--gpus", "two"])
    assert done.exit_code == 2 and "expected all, none, a count (2) or GPU indices" in done.output
