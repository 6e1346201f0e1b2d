"""A job Slurm is still cleaning up (COMPLETING, reason TimeLimit) is over for the user: `jupyter`, `exec` and a
reattaching tunnel get JobEnded with the outcome's hint, never "wait for it". With KillWait set, squeue shows
COMPLETING for seconds after the tunnel's watcher already saw the job end (CI, stop 20)."""

from __future__ import annotations

import sys

import pytest

from devenv.cluster.errors import JobEnded
from devenv.cluster.slurm_text import parse_jobs
from devenv.config.profiles import HostProfile
from devenv.remote.base import Result
from devenv.services.environments.slurm.backend import SlurmEnvironments

LINE = "5|devenv-me-cpu|{state}|{reason}|node1|0:00|2026-12-02T03:29:10|2:00|1|debug|devenv:x"


class Slurm:
    def __init__(self, state: str, reason: str):
        self.listed = parse_jobs(LINE.format(state=state, reason=reason))

    def jobs(self, name):
        return self.listed

    def job(self, job_id):
        return self.listed[0]

    def hostnames(self, nodes):
        return ["node1"]


class Login:
    def run(self, command, **kw) -> Result:
        if command.startswith("printf"):
            return Result(command, "/home/me", "", 0)
        return Result(command, "jupyter: shutting down\n", "", 0)    # the log's tail


class Files:
    def env_dir(self, key):
        return f"~/.devenv/envs/{key}"


def backend(state: str, reason: str) -> SlurmEnvironments:
    host = HostProfile(name="hpc", source="t", local=True, runtime="slurm", python=sys.executable)
    return SlurmEnvironments(host, Login(), Slurm(state, reason), Files(), owner="me")


@pytest.mark.parametrize("state, reason, outcome, hint", [
    ("COMPLETING", "TimeLimit", "TIMEOUT", "raise slurm.time"),
    ("COMPLETING", "NodeDown", "NODE_FAIL", "healthy node"),
    ("TIMEOUT", "TimeLimit", "TIMEOUT", "raise slurm.time"),
])
def test_an_ending_or_ended_job_is_job_ended_with_its_outcome(state, reason, outcome, hint):
    svc = backend(state, reason)
    with pytest.raises(JobEnded) as caught:
        svc.running("cpu")
    assert outcome in caught.value.message and hint in caught.value.hint
    assert "shutting down" in caught.value.message          # the log's last lines come with it
    assert svc.ended_reason("cpu", "5") == caught.value.message


def test_a_running_job_is_not_ended():
    assert backend("RUNNING", "None").ended_reason("cpu", "5") is None
