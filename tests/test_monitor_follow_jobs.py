"""`devenv monitor CLUSTER` follows the cluster's jobs while it runs: a job started after it shows its nodes,
one that ended is marked job-ended (not a stream that reconnects forever). The logic on a fake job source
(JobWatch, SourceFollower), and the TUI applying what they found (Textual's Pilot)."""

from __future__ import annotations

import asyncio
import time

import pytest
from monitor_helpers import T0, FixedSampler, recorded_snapshot

from devenv.cli.monitor_sources import Source, SourceFollower
from devenv.config.profiles import HostProfile
from devenv.errors import ConnectError
from devenv.services import cluster_monitor
from devenv.services.cluster_monitor import JobWatch, no_job_snapshot
from devenv.services.monitor import JOB_ENDED, JobPlace
from devenv.tui import monitor_app
from devenv.tui.monitor_app import HostChanges, HostPanel, MonitorServices, create_monitor_app

pytestmark = pytest.mark.timeout(60)
CLUSTER = HostProfile(name="hpc", source="t", runtime="slurm")


def place(job: str, node: str, nodes=("node1",)) -> JobPlace:
    return JobPlace("hpc", job, f"devenv-me-{job}", node, tuple(nodes), "cpu", "29:00")


class FakeJobs:
    """The job source: what squeue would say at each look, or an error (a busy slurmctld)."""

    def __init__(self, *looks):
        self.looks = list(looks)

    def __call__(self):
        look = self.looks.pop(0)
        if isinstance(look, Exception):
            raise look
        return look


def test_job_watch_says_which_nodes_came_and_which_went():
    a1 = place("7", "node1")
    b1, b2 = place("9", "node1", ("node1", "node2")), place("9", "node2", ("node1", "node2"))
    watch = JobWatch(FakeJobs([a1, b1, b2], ConnectError("lost", "retry"), [b1, b2], [b1, b2], []), [a1])
    changes = watch.refresh()
    assert changes.added == [b1, b2] and changes.ended == []
    with pytest.raises(ConnectError):
        watch.refresh()                       # a failed look: raised, and nothing forgotten
    changes = watch.refresh()
    assert changes.added == [] and changes.ended == [a1]
    assert not watch.refresh()                # nothing new
    assert watch.refresh().ended == [b1, b2]


def test_follower_turns_changes_into_sources_ended_rows_and_drops_the_no_job_row():
    b1 = place("9", "node1")
    found = [Source("hpc", CLUSTER, fixed=no_job_snapshot("hpc"))]
    follower = SourceFollower(found, watches={"hpc": JobWatch(FakeJobs(ConnectError("x", "y"), [b1], []), [])})
    assert follower
    first = follower.refresh()
    assert (first.added, first.ended, first.gone) == ([], [], [])      # the failed look is skipped
    started = follower.refresh()
    assert [(s.name, s.place) for s in started.added] == [("hpc/job-9/node1", b1)]
    assert started.gone == ["hpc"]
    ended = follower.refresh()
    assert [s.host for s in ended.ended] == ["hpc/job-9/node1"]
    snap = ended.ended[0]
    assert snap.state == JOB_ENDED and snap.job == b1 and "job 9" in snap.message and "no longer runs" in snap.message


def test_a_follower_of_plain_hosts_follows_nothing():
    box = HostProfile(name="box", source="t")
    assert not SourceFollower([Source("box", box)], watches=None)


def test_the_tui_adds_a_new_jobs_nodes_and_marks_an_ended_job(monkeypatch):
    monkeypatch.setattr(monitor_app, "FOLLOW_EVERY_S", 0.05)
    old, new = "hpc/job-7/node1", "hpc/job-9/node2"
    made: dict[str, FixedSampler] = {}

    def factory(host: str) -> FixedSampler:
        made[host] = FixedSampler(recorded_snapshot(host, 1))
        return made[host]

    ended = cluster_monitor.ended_snapshot(place("7", "node1"), clock=lambda: T0)
    looks = [HostChanges(added=[new]), HostChanges(ended=[ended])]
    services = MonitorServices(follow_hosts=lambda: looks.pop(0) if looks else HostChanges())
    app = create_monitor_app([old], factory, services, clock=lambda: T0)

    async def drive():
        async with app.run_test(size=(130, 50)) as pilot:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and (looks or new not in made):
                await pilot.pause(0.05)
            await pilot.pause(0.2)
            hosts = [p.host for p in app.query(HostPanel)]
            assert hosts == [old, new]
            assert made[new].started and app.sub_title == "2 of 2 hosts"
            assert made[old].stopped and old not in app.samplers      # no stream to a job that is gone
            panel = next(p for p in app.query(HostPanel) if p.host == old)
            assert panel.snapshot.state == JOB_ENDED

    asyncio.run(drive())
