"""The monitor's sources on a Slurm cluster (L2): the nodes of the user's running devenv jobs.

Each node of each job is one monitored "host" behind the monitor's usual interface (HostSampler, sample_once,
HostSnapshot): its connection is a StepConnection (schedulers/slurm_step.py) that runs the same nvidia-smi
stream and process loop on that node under `srun --overlap --jobid J --nodelist NODE`, through the login
node. So one stream per node, the same sampler, and the snapshot carries its JobPlace, by which the front ends
group nodes by job. A cluster where none of the user's devenv jobs runs is one snapshot saying so (no-job).
Jobs come and go while the monitor runs: JobWatch, asked again every so often, says which nodes are new and
which jobs ended (their nodes then show job-ended, not a reconnecting stream).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from devenv.cluster import slurm_job, slurm_text
from devenv.cluster.slurm_text import Job, QueueSpot
from devenv.config.profiles import HostProfile
from devenv.env import spec as envspec
from devenv.remote.base import Connection
from devenv.schedulers.slurm import Slurm
from devenv.schedulers.slurm_step import StepConnection
from devenv.services.monitor import JOB_ENDED, JOB_PENDING, NO_JOB, HostSnapshot, JobPlace

FOLLOW_EVERY_S = 10.0   # how often a running monitor looks at a cluster's jobs again (one squeue per cluster)
# how long an ended job's node keeps its job-ended row before it goes: long enough to be read in the TUI, and a
# monitor left running for days (a Prometheus exporter) does not keep a series for every job it ever saw
ENDED_KEEP_S = 300.0


def job_places(conn: Connection, host: HostProfile, owner: str | None = None) -> list[JobPlace]:
    """Every node of the user's running devenv jobs (environments, sanity and check jobs: squeue --me, names
    devenv-*), job by job in submission order, each job's nodes in Slurm's order."""
    return jobs_and_places(conn, host, owner, waiting=False)[0]


@dataclass(frozen=True)
class Waiting:
    """A devenv job of the user's still in Slurm's queue, and where it stands."""

    job: Job
    spot: QueueSpot


def jobs_and_places(conn: Connection, host: HostProfile, owner: str | None = None,
                    waiting: bool = True) -> tuple[list[JobPlace], list[Waiting]]:
    """job_places, and (waiting) the user's devenv jobs still pending, each with its place in the queue."""
    slurm = Slurm(conn, host.name)
    env_prefix = f"{slurm_job.JOB_PREFIX}{owner or envspec.owner()}-"
    places = []
    listed = slurm.jobs_by_prefix(slurm_job.JOB_PREFIX)
    pending = [Waiting(j, slurm.queue_spot(j.job_id)) for j in listed if j.phase == "pending"] if waiting else []
    jobs = [j for j in listed if j.phase == "running" and j.nodes]
    for job in sorted(jobs, key=lambda j: int(j.job_id.split("_")[0]) if j.job_id.split("_")[0].isdigit() else 0):
        nodes = tuple(slurm.hostnames(job.nodes or ""))
        env = job.name[len(env_prefix):] if job.name.startswith(env_prefix) else None
        for node in nodes:
            places.append(JobPlace(host.name, job.job_id, job.name, node, nodes, env or None,
                                   job.time_left or None))
    return places, pending


def node_connection(login: Connection, place: JobPlace, *, owns: bool = False) -> StepConnection:
    """A connection whose commands run on place's node inside its job (owns: closing it closes login)."""
    return StepConnection(login, place.job_id, place.node, place.name, owns=owns)


def waiting_jobs(conn: Connection, host: HostProfile) -> list[Waiting]:
    """The user's devenv jobs still in the queue, each with its place there (one squeue, one more per job)."""
    return jobs_and_places(conn, host)[1]


def no_job_snapshot(cluster: str, waiting: list[Waiting] | None = None,
                    clock: Callable[[], float] = time.time) -> HostSnapshot:
    """A cluster where no devenv job of the user's runs: said so, or (waiting) the jobs still in the queue,
    each with Slurm's reason, how long it has waited and its place in the partition's queue."""
    if waiting:
        said = "; ".join(f"job {w.job.job_id} ({w.job.name}) " + slurm_text.wait_text(w.job, w.spot, None, None)
                         for w in waiting)
        return HostSnapshot(cluster, JOB_PENDING, clock(), f"{cluster}: {said}",
                            "its nodes show up here once it runs; `devenv status " + cluster + "` shows it too")
    return HostSnapshot(cluster, NO_JOB, clock(), f"{cluster}: no devenv job of yours runs there (squeue --me)",
                        f"`devenv up {cluster}` starts one; its nodes show up here once it runs")


def ended_snapshot(place: JobPlace, clock: Callable[[], float] = time.time) -> HostSnapshot:
    """A node of a job that no longer runs (cancelled, done, timed out, its node failed): said, not retried."""
    return HostSnapshot(place.name, JOB_ENDED, clock(), f"job {place.job_id} ({place.job_name}) no longer runs "
                        f"on {place.cluster} (squeue --me)", f"`devenv status {place.cluster}` says how it ended",
                        job=place)


@dataclass(frozen=True)
class JobChanges:
    added: list[JobPlace] = field(default_factory=list)    # nodes of jobs that started since the last look
    ended: list[JobPlace] = field(default_factory=list)    # nodes of jobs that no longer run

    def __bool__(self) -> bool:
        return bool(self.added or self.ended)


class JobWatch:
    """The nodes of one cluster's devenv jobs, looked at again on refresh(): what came and what went since the
    last look. list_places is job_places on the login node's connection (a fake job source in the tests)."""

    def __init__(self, list_places: Callable[[], list[JobPlace]], known: list[JobPlace]):
        self._list = list_places
        self._known = {p.name: p for p in known}

    def refresh(self) -> JobChanges:
        """Raises what list_places raises (a failed look changes nothing: the next one decides)."""
        now = {p.name: p for p in self._list()}
        changes = JobChanges([p for name, p in now.items() if name not in self._known],
                             [p for name, p in self._known.items() if name not in now])
        self._known = now
        return changes

    @property
    def running(self) -> bool:
        """Whether a job ran at the last look that answered."""
        return bool(self._known)


class FixedSampler:
    """A source whose one snapshot does not change (a cluster without a job): the sampler interface, no thread."""

    def __init__(self, snapshot: HostSnapshot):
        self.host = snapshot.host
        self._snapshot = snapshot
        self._stopped = threading.Event()

    def start(self) -> FixedSampler:
        return self

    def stop(self, timeout: float = 3.0) -> None:
        self._stopped.set()

    def snapshot(self) -> HostSnapshot:
        return self._snapshot

    def wait_for_update(self, version: int, timeout: float) -> tuple[int, HostSnapshot]:
        if version == 1:
            self._stopped.wait(timeout)   # nothing new, ever
        return 1, self._snapshot
