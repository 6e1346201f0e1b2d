"""The login node lost while `up` waits for its job (the real cut is tests/integration/slurm/
test_slurm_lost_connection.py): the bounded re-dials, what is said, and what is remembered for the next command.
Slurm's answers are squeue lines as the test cluster prints them; the clock is the test's."""

from __future__ import annotations

import sys

import pytest

from devenv.cluster.slurm_job import SlurmSettings
from devenv.cluster.slurm_text import parse_jobs
from devenv.config.profiles import HostProfile
from devenv.env import state as envstate
from devenv.errors import ConnectError
from devenv.services.environments.slurm import backend
from devenv.services.environments.slurm.backend import SlurmEnvironments

PENDING = "21|devenv-me-cpu|PENDING|Priority||10:00|N/A|10:00|1|debug|devenv:x"


class LoginNode:
    """squeue through a connection that is down for the first `down_for` looks after the loss."""

    def __init__(self, down_for: int):
        self.down_for = down_for
        self.looks = 0
        self.cancelled: list[str] = []

    def job(self, job_id):
        self.looks += 1
        if self.looks <= self.down_for:
            raise ConnectError("cannot connect to hpc at 127.0.0.1:1: connection refused")
        return parse_jobs(PENDING)[0]

    def cancel(self, job_id):
        self.cancelled.append(job_id)


class Events:
    def __init__(self):
        self.steps: list[str] = []

    def step(self, text):
        self.steps.append(text)


@pytest.fixture
def lost(tmp_path, monkeypatch):
    monkeypatch.setenv("DEVENV_HOME", str(tmp_path))
    slept: list[float] = []

    def make(down_for: int):
        host = HostProfile(name="hpc", source="t", local=True, runtime="slurm", python=sys.executable,
                           slurm=SlurmSettings())
        node = LoginNode(down_for)
        svc = SlurmEnvironments(host, object(), node, object(), owner="me", sleep=slept.append)
        events = Events()
        error = svc._lost_connection("cpu", "21", ConnectError("connection to hpc lost"), events)
        return error, node, events

    return make, slept


def test_the_job_is_cancelled_once_the_login_node_answers_again(lost):
    make, slept = lost
    error, node, events = make(down_for=2)
    assert node.cancelled == ["21"] and slept == list(backend.RECONNECT_PAUSES_S[:3])
    assert events.steps[0].startswith("Lost the connection to hpc while `up` waited for job 21")
    assert events.steps[-1] == "Reconnected to hpc: devenv cancelled job 21"
    assert error.exit_code == 3 and "devenv reconnected and cancelled the job" in error.message
    assert not envstate.load("hpc", "cpu").get("lost_job")


def test_a_login_node_that_stays_away_leaves_the_job_named_and_remembered(lost):
    make, slept = lost
    error, node, events = make(down_for=99)
    assert node.cancelled == [] and slept == list(backend.RECONNECT_PAUSES_S)   # bounded: 30 s, then said
    assert error.exit_code == 3 and "job 21 may still be queued" in error.message
    assert "`devenv down hpc --env cpu` cancels it" in (error.hint or "")
    assert envstate.load("hpc", "cpu")["lost_job"] == "21"
