"""`up`'s wait in Slurm's queue, as the user reads it: Slurm's reason (never a bare "None"), how long the job has
waited, the limit (slurm.queue_timeout), its place in the partition's queue, at a steady cadence and not only
when the reason changes. Slurm's answers are squeue lines in devenv's formats as Slurm 22.05 prints them on the
test cluster filled by another user's jobs (tests/fixtures/slurm/squeue_filled_by_another_user.txt: the first
pending job waits on Resources, the rest on Priority); the clock is the test's."""

from __future__ import annotations

import sys

import pytest

from devenv.cluster import slurm_text
from devenv.cluster.errors import QueueTimeout
from devenv.cluster.slurm_job import SlurmSettings
from devenv.cluster.slurm_text import parse_jobs
from devenv.config.profiles import HostProfile
from devenv.services.environments.slurm.backend import SlurmEnvironments

LINE = "21|devenv-me-cpu|PENDING|{reason}||10:00|N/A|10:00|1|debug|devenv:x"
# QUEUE_COMMAND's answer: the cluster's clock, then the pending jobs in scheduling order
QUEUE = ("2026-12-03T15:01:05\n6|debug|2026-12-03T15:00:20\n21|debug|2026-12-03T15:00:40\n"
         "7|debug|2026-12-03T15:00:20\n")


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class Slurm:
    """Slurm's answers, poll by poll (the last one repeats)."""

    def __init__(self, reasons: list[str]):
        self.reasons = reasons
        self.polls = 0
        self.cancelled: list[str] = []

    def job(self, job_id):
        reason = self.reasons[min(self.polls, len(self.reasons) - 1)]
        self.polls += 1
        return parse_jobs(LINE.format(reason=reason))[0]

    def queue_spot(self, job_id):
        return slurm_text.queue_spot(job_id, QUEUE)

    def cancel(self, job_id):
        self.cancelled.append(job_id)


class Events:
    def __init__(self):
        self.steps: list[str] = []

    def step(self, text):
        self.steps.append(text)


def waiting(reasons: list[str], queue_timeout: int = 60):
    clock = Clock()
    host = HostProfile(name="hpc", source="t", local=True, runtime="slurm", python=sys.executable,
                       slurm=SlurmSettings(queue_timeout=queue_timeout))
    slurm = Slurm(reasons)
    svc = SlurmEnvironments(host, object(), slurm, object(), owner="me", clock=clock, sleep=clock.sleep)
    events = Events()
    with pytest.raises(QueueTimeout) as caught:
        svc._wait_start("cpu", "21", events)
    return events.steps, caught.value, slurm


def test_the_first_pending_line_waits_for_slurms_reason_and_never_says_none():
    steps, _, _ = waiting(["None", "None", "Resources"])
    assert steps[0].startswith("Job 21 pending 25 s (at most 1m00s: slurm.queue_timeout): Resources (waiting for "
                               "resources to become free); position 2 of 3 in partition debug"), steps[0]
    assert not any("None" in s for s in steps)


def test_a_reason_slurm_never_gives_is_said_in_words_after_a_few_seconds():
    steps, _, _ = waiting(["None"])
    assert "not scheduled yet (Slurm's scheduler has not looked at it)" in steps[0]
    assert not any("None" in s for s in steps)


def test_lines_come_at_a_steady_cadence_with_the_same_reason_and_the_timeout_says_it_all():
    steps, error, slurm = waiting(["Priority"], queue_timeout=60)
    # the first line at once (Slurm gave a reason), then every 10 s while it stays the same
    assert len(steps) == 6 and all("Priority (jobs of higher priority are ahead of it)" in s for s in steps)
    assert slurm.cancelled == ["21"]
    assert "did not start within 60 s" in error.message and "devenv cancelled it" in error.message
    assert "Priority" in error.message and "position 2 of 3" in error.message


def test_a_changed_reason_is_said_at_once():
    steps, _, _ = waiting(["Priority", "Priority", "Resources"], queue_timeout=5)
    assert [s.split("queue_timeout): ")[1].split(" ")[0] for s in steps[:2]] == ["Priority", "Resources"]


def test_unavailable_nodes_keep_slurms_detail():
    job, = parse_jobs((__import__("pathlib").Path(__file__).parent / "fixtures" / "slurm" /
                       "squeue_pending_nodes_drained.txt").read_text())
    assert job.reason_code == "ReqNodeNotAvail" and job.hopeless is None
    assert job.reason_text() == ("ReqNodeNotAvail (a required node is not available (down, drained or reserved)): "
                                 "UnavailableNodes:node[1-2]")


def test_queue_spot_of_a_job_slurm_does_not_list_is_empty():
    assert slurm_text.queue_spot("99", QUEUE) == slurm_text.QueueSpot()
    assert slurm_text.queue_spot("21", QUEUE) == slurm_text.QueueSpot(25, 2, 3)
