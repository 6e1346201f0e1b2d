"""`devenv monitor CLUSTER` follows the cluster's jobs while it runs: a job started after it shows its nodes,
one that ended is marked job-ended (not a stream that reconnects forever). The logic on a fake job source
(JobWatch, SourceFollower), the TUI applying what they found (Textual's Pilot), and the headless streams
(--watch --json, --prometheus) reading one SamplerSet that a SamplerFollower keeps in step."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace

import pytest
from click.testing import CliRunner
from monitor_helpers import T0, FixedSampler, recorded_snapshot, wait_until
from prometheus_client import CollectorRegistry, generate_latest

from devenv.cli import main
from devenv.config.profiles import HostProfile
from devenv.errors import ConnectError
from devenv.services import monitor_sources
from devenv.services.environments.slurm import places as cluster_monitor
from devenv.services.environments.slurm.places import JobWatch, no_job_snapshot
from devenv.services.monitor import JOB_ENDED, NO_JOB, JobPlace
from devenv.services.monitor_sources import SamplerFollower, Source, SourceFollower
from devenv.services.monitor_stream import DcgmCollector, SamplerSet, watch_records
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


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_ended_row_goes_after_a_while_and_the_no_job_row_comes_back():
    b1, c1 = place("9", "node1"), place("11", "node2")
    clock = Clock()
    found = [Source("hpc", CLUSTER, fixed=no_job_snapshot("hpc"))]
    jobs = FakeJobs([b1], [], [], ConnectError("busy", "retry"), [c1])
    follower = SourceFollower(found, watches={"hpc": JobWatch(jobs, [])}, clock=clock)
    assert follower.refresh().gone == ["hpc"]                             # job 9 runs: no-job row out
    clock.now += 10
    ended = follower.refresh()                                            # job 9 ended: its row says so
    assert [s.host for s in ended.ended] == [b1.name] and not ended.added and not ended.gone
    clock.now += cluster_monitor.ENDED_KEEP_S - 1
    assert not follower.refresh().gone                                    # still shown
    clock.now += 1
    back = follower.refresh()                          # a failed look: the row still goes, the cluster is back
    assert back.gone == [b1.name]
    assert [(s.name, s.fixed.state if s.fixed else None) for s in back.added] == [("hpc", NO_JOB)]
    again = follower.refresh()                                            # a new job: no-job row out again
    assert [s.name for s in again.added] == [c1.name] and again.gone == ["hpc"]


def test_a_cluster_that_had_a_job_at_the_start_gets_its_no_job_row_once_the_job_is_gone():
    b1 = place("9", "node1")
    clock = Clock()
    follower = SourceFollower([Source(b1.name, CLUSTER, place=b1)], watches={"hpc": JobWatch(FakeJobs([], []),
                                                                                            [b1])}, clock=clock)
    assert not follower.refresh().added
    clock.now += cluster_monitor.ENDED_KEEP_S
    later = follower.refresh()
    assert later.gone == [b1.name] and [s.name for s in later.added] == ["hpc"]


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


# --- the headless streams: --watch --json and --prometheus -------------------------------------------------

def node_sampler(source: Source) -> FixedSampler:
    """A started-when-asked sampler of a new job's node, with two recorded GPUs."""
    return FixedSampler(replace(recorded_snapshot(source.name, n_gpus=2, gap=False), job=source.place))


def test_the_sampler_follower_puts_new_nodes_in_and_ended_ones_as_job_ended():
    b1 = place("9", "node1")
    no_job = FixedSampler(no_job_snapshot("hpc"))
    live = SamplerSet([no_job])
    found = [Source("hpc", CLUSTER, fixed=no_job_snapshot("hpc"))]
    looks = FakeJobs(ConnectError("slurmctld busy", "retry"), [b1], [b1], [])
    made: list[FixedSampler] = []

    def factory(source):
        made.append(node_sampler(source))
        return made[-1]

    follow = SamplerFollower(SourceFollower(found, watches={"hpc": JobWatch(looks, [])}), live, factory)
    follow.follow_once()                              # a failed look changes nothing
    assert live.hosts() == ["hpc"] and not no_job.stopped
    follow.follow_once()                              # the job runs: its node in, the no-job row out
    assert live.hosts() == ["hpc/job-9/node1"] and no_job.stopped
    [node] = made
    assert node.started and not node.stopped and next(iter(live)) is node
    follow.follow_once()
    assert live.hosts() == ["hpc/job-9/node1"] and next(iter(live)) is node
    follow.follow_once()                              # the job ended: a fixed job-ended snapshot, stream stopped
    assert node.stopped and live.hosts() == ["hpc/job-9/node1"]
    ended = next(iter(live)).snapshot()
    assert ended.state == JOB_ENDED and ended.job == b1 and "no longer runs" in ended.message


def test_the_sampler_follower_looks_again_on_its_own_thread():
    b1 = place("9", "node1")
    live = SamplerSet([FixedSampler(no_job_snapshot("hpc"))])
    found = [Source("hpc", CLUSTER, fixed=no_job_snapshot("hpc"))]
    looks = FakeJobs([b1], *[[]] * 1000)
    follow = SamplerFollower(SourceFollower(found, watches={"hpc": JobWatch(looks, [])}), live, node_sampler,
                             every=0.01).start()
    try:
        wait_until(lambda: [s.snapshot().state for s in live] == [JOB_ENDED], 20, what="the node, then job-ended")
    finally:
        follow.stop()


def test_ndjson_writes_a_new_nodes_records_and_one_job_ended_record():
    first = FixedSampler(recorded_snapshot("box", n_gpus=1, gap=False))
    live = SamplerSet([first])
    b1 = place("9", "node1")
    node = node_sampler(Source(b1.name, CLUSTER, place=b1))
    ticks: list[float] = []

    def tick(_seconds):
        ticks.append(_seconds)
        if len(ticks) == 2:
            live.put(node)                                          # a job started
        if len(ticks) == 4:
            live.put(cluster_monitor.FixedSampler(cluster_monitor.ended_snapshot(b1)))   # it ended

    records = list(watch_records(live, 1.0, stop=lambda: len(ticks) >= 10, sleep=tick))
    assert [(r["host"], r["state"]) for r in records] == [
        ("box", "ok"), (b1.name, "ok"), (b1.name, JOB_ENDED)]             # job-ended once, not each second
    assert records[2]["job"]["job_id"] == "9" and "no longer runs" in records[2]["message"]
    json.dumps(records)


def test_prometheus_shows_a_new_nodes_gpus_and_drops_them_once_its_job_ended():
    b1 = place("9", "node1")
    live = SamplerSet([FixedSampler(no_job_snapshot("hpc"))])
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DcgmCollector(live))

    def scrape() -> list[str]:
        return generate_latest(registry).decode().splitlines()

    def gpu_lines(lines):
        return [line for line in lines if line.startswith("DCGM_FI_DEV_GPU_UTIL{") and b1.name in line]

    before = scrape()
    assert not gpu_lines(before) and f'devenv_host_up{{Hostname="hpc",state="{NO_JOB}"}} 0.0' in before
    live.pop("hpc")
    live.put(node_sampler(Source(b1.name, CLUSTER, place=b1)))
    running = scrape()
    assert len(gpu_lines(running)) == 2 and f'devenv_host_up{{Hostname="{b1.name}",state="ok"}} 1.0' in running
    assert not any('Hostname="hpc"' in line for line in running)
    live.put(cluster_monitor.FixedSampler(cluster_monitor.ended_snapshot(b1)))
    ended = scrape()
    assert not any(line.startswith("DCGM_") and b1.name in line for line in ended)
    assert f'devenv_host_up{{Hostname="{b1.name}",state="{JOB_ENDED}"}} 0.0' in ended


class NodeSampler(FixedSampler):
    """A new job's node whose snapshot has been read (by the stream) `reads` times."""

    def __init__(self, source: Source):
        super().__init__(node_sampler(source).snapshot())
        self.reads = 0

    def snapshot(self):
        self.reads += 1
        return super().snapshot()


class Squeue:
    """squeue as `devenv monitor hpc --watch --json` sees it in-process: no job; then job 9 on node1 until the
    stream has read its node; then no job again. `done` once a look came after the job-ended one (so that
    look's changes were applied)."""

    def __init__(self, b1: JobPlace):
        self.b1, self.node, self.ended_looks = b1, None, 0
        self.calls = 0

    def __call__(self, conn, profile):
        self.calls += 1
        if self.calls == 1:
            return []
        if self.node is None or not self.node.reads:
            return [self.b1]
        self.ended_looks += 1
        return []

    @property
    def done(self) -> bool:
        return self.ended_looks > 1


def test_the_cli_stream_follows_a_job_that_starts_and_ends(monkeypatch):
    """run_headless as the command builds it, on a fake squeue and fake samplers: the job's node writes its
    records once it runs and one job-ended record once it no longer does; the command then exits 0."""
    b1 = place("9", "node1")
    looks = Squeue(b1)
    box = HostProfile(name="box", source="t")
    monkeypatch.setattr(cluster_monitor, "FOLLOW_EVERY_S", 0.05)
    monkeypatch.setattr(cluster_monitor, "job_places", looks)
    monkeypatch.setattr(monitor_sources, "connect", lambda profile, accept_new_host=False: None)
    monkeypatch.setattr(monitor_sources, "sources", lambda profiles, accept_new_host=False: [
        Source("hpc", CLUSTER, fixed=no_job_snapshot("hpc")), Source("box", box)])
    monkeypatch.setattr("devenv.cli.monitor_cmd.load_host", lambda name: CLUSTER)
    deadline = time.monotonic() + 30       # a bound, not an assert: the asserts below say what was missing

    class Box(FixedSampler):
        """A plain host; at a pass after the last look (or at the bound) it ends the stream as Ctrl-C does."""

        def __init__(self):
            super().__init__(recorded_snapshot("box", n_gpus=1, gap=False))
            self.after = 0

        def snapshot(self):
            self.after += looks.done
            if self.after > 3 or time.monotonic() > deadline:
                raise KeyboardInterrupt
            return super().snapshot()

    def sampler_for(source, interval, accept_new_host=False):
        if source.name == "box":
            return Box()
        if source.fixed:
            return cluster_monitor.FixedSampler(source.fixed)
        looks.node = NodeSampler(source)
        return looks.node

    monkeypatch.setattr(monitor_sources, "sampler_for", sampler_for)
    result = CliRunner().invoke(main, ["monitor", "hpc", "--watch", "--json", "--interval", "0.1"])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.output.splitlines()]
    seen = [(r["host"], r["state"]) for r in records]
    assert seen == [("hpc", NO_JOB), ("box", "ok"), (b1.name, "ok"), (b1.name, JOB_ENDED)], seen


def test_prometheus_drops_an_ended_nodes_series_after_a_while_and_shows_the_no_job_row_again():
    b1 = place("9", "node1")
    clock = Clock()
    live = SamplerSet([FixedSampler(no_job_snapshot("hpc"))])
    found = [Source("hpc", CLUSTER, fixed=no_job_snapshot("hpc"))]
    follower = SourceFollower(found, watches={"hpc": JobWatch(FakeJobs([b1], [], []), [])}, clock=clock)
    follow = SamplerFollower(follower, live, lambda source: monitor_sources.sampler_for(source, 1.0)
                             if source.fixed else node_sampler(source))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DcgmCollector(live))

    def up_lines() -> list[str]:
        return [ln for ln in generate_latest(registry).decode().splitlines() if ln.startswith("devenv_host_up{")]

    follow.follow_once()
    follow.follow_once()
    assert up_lines() == [f'devenv_host_up{{Hostname="{b1.name}",state="{JOB_ENDED}"}} 0.0']
    clock.now += cluster_monitor.ENDED_KEEP_S
    follow.follow_once()
    assert up_lines() == [f'devenv_host_up{{Hostname="hpc",state="{NO_JOB}"}} 0.0']
