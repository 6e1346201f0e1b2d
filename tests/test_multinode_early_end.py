"""A multi-node sanity job that Slurm ends early (time limit, cancel, node failure) is reported by its
outcome, with the hint for that outcome, even while squeue still says COMPLETING; never as "running" and never
as a verdict. The job's states are squeue lines in devenv's JOB_FORMAT as Slurm 22.05 prints them."""

from __future__ import annotations

import pytest

from devenv.cluster.errors import JobEnded
from devenv.cluster.slurm_text import parse_jobs
from devenv.config.profiles import HostProfile
from devenv.remote.base import Result
from devenv.services.environments.slurm import sanity as multinode_sanity

pytestmark = pytest.mark.timeout(60)
RUNNING = "12|devenv-sanity|RUNNING|None|node[1-2]|14:58|2026-12-02T04:00:00|15:00|2|debug|sanity"


def line(state: str, reason: str) -> str:
    return f"12|devenv-sanity|{state}|{reason}|node[1-2]|0:00|2026-12-02T04:00:00|15:00|2|debug|sanity"


class FakeSlurm:
    """squeue's answers, one per look; the last one repeats."""

    def __init__(self, *lines: str):
        self.jobs = [parse_jobs(ln)[0] for ln in lines]
        self.cancelled: list[str] = []

    def submit(self, request, script) -> str:
        return "12"

    def job(self, job_id):
        return self.jobs.pop(0) if len(self.jobs) > 1 else self.jobs[0]

    def cancel(self, job_id):
        self.cancelled.append(job_id)

    def hostnames(self, nodes):
        return ["node1", "node2"]


class FakeLogin:
    def run(self, command, **kw) -> Result:
        if command.startswith("printf"):
            return Result(command, "/home/me", "", 0)
        if command.startswith("cat"):
            return Result(command, "", "No such file", 1)
        return Result(command, "", "", 0)

    def put(self, data, path, mode=0o644):
        pass


def run(slurm: FakeSlurm, said: list[str]):
    host = HostProfile(name="hpc", source="t", runtime="slurm", python="/venv/bin/python")
    return multinode_sanity.run_multinode(host, FakeLogin(), slurm, 2, on_step=said.append, sleep=lambda s: None)


@pytest.mark.parametrize("state, reason, outcome, hint", [
    ("COMPLETING", "TimeLimit", "TIMEOUT", "time limit"),
    ("TIMEOUT", "TimeLimit", "TIMEOUT", "time limit"),
    ("COMPLETING", "NodeDown", "NODE_FAIL", "node of the allocation failed"),
    ("NODE_FAIL", "NodeDown", "NODE_FAIL", "node of the allocation failed"),
    ("CANCELLED", "None", "CANCELLED", "cancelled from outside devenv"),
    ("PREEMPTED", "None", "PREEMPTED", "higher-priority job"),
])
def test_an_early_end_is_reported_by_its_outcome(state, reason, outcome, hint):
    said: list[str] = []
    with pytest.raises(JobEnded) as caught:
        run(FakeSlurm(RUNNING, line(state, reason)), said)
    assert f"ended before its checks did: {outcome}:" in caught.value.message
    assert hint in caught.value.hint
    assert not any("running" in s and state in s for s in said)


def test_a_job_completing_normally_is_waited_for_and_then_judged():
    said: list[str] = []
    result = run(FakeSlurm(RUNNING, line("COMPLETING", "None"), line("COMPLETED", "None")), said)
    assert said[-1] == "Job 12 ending on node[1-2] (Slurm is cleaning up)"
    words = str(result.verdict.to_dict())
    assert "job 12 ended (COMPLETED: its script exited) without a multi-node result" in words, words
    assert "Jupyter" not in words
