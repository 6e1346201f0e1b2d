"""Slurm.job tells a job Slurm does not know from a look that failed: under load slurmctld answers squeue
with "Socket timed out on send/recv operation", which used to read as "the job is gone" (a held tunnel then
closed itself, `up` gave up on a healthy job). Messages as Slurm 22.05 prints them."""

from __future__ import annotations

import pytest

from devenv.errors import DevenvError
from devenv.remote.base import Result
from devenv.schedulers import slurm as slurm_mod
from devenv.schedulers.slurm import Slurm

TIMED_OUT = "slurm_load_jobs error: Socket timed out on send/recv operation\n"
UNKNOWN = "slurm_load_jobs error: Invalid job id specified\n"
LINE = "12|devenv-me-cpu|RUNNING|None|node1|29:00|2026-12-02T04:00:00|30:00|1|debug|devenv:abc\n"


class Login:
    """Answers each command from a script: (stdout, stderr, exit code) per call, in order."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.commands: list[str] = []

    def run(self, command, **kw) -> Result:
        self.commands.append(command)
        out, err, code = self.answers.pop(0)
        return Result(command, out, err, code)


@pytest.fixture(autouse=True)
def no_wait(monkeypatch):
    monkeypatch.setattr(slurm_mod.time, "sleep", lambda s: None)


def test_an_unknown_id_is_none():
    login = Login(("", UNKNOWN, 1), ("", UNKNOWN, 1))
    assert Slurm(login, "hpc").job("12") is None


def test_a_timed_out_look_is_asked_again_not_taken_for_a_gone_job():
    login = Login(("", TIMED_OUT, 1), (LINE, "", 0))
    job = Slurm(login, "hpc").job("12")
    assert job is not None and job.state == "RUNNING"


def test_a_look_that_keeps_failing_is_an_error_not_none():
    login = Login(("", TIMED_OUT, 1), ("", TIMED_OUT, 1))
    with pytest.raises(DevenvError, match="Socket timed out") as caught:
        Slurm(login, "hpc").job("12")
    assert "sinfo" in caught.value.hint
