"""What `devenv monitor` watches (L2), as sources behind the monitor's one host interface: where the host's backend
watches the host itself (EnvironmentBackend.watched_places says None), the host; else each place it names (a
Slurm cluster: every node of the user's running devenv jobs, environments/slurm/places), each a host named
cluster/job-J/node whose samples come through the login node, or one row saying that no job runs. The widgets,
--once, --json and the NDJSON/Prometheus streams see only snapshots. The TUI and the streams follow the clusters'
jobs while they run (SourceFollower; SamplerFollower for the streams' SamplerSet): a new job's nodes appear, an
ended job's are marked."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from devenv.config.profiles import HostProfile
from devenv.errors import DevenvError
from devenv.remote.base import Connection
from devenv.services.monitor import ERROR, HostSnapshot, JobPlace
from devenv.services.monitor_stream import SamplerSet

if TYPE_CHECKING:
    from devenv.services.environments.slurm.places import FixedSampler, JobWatch
    from devenv.services.monitor import HostSampler


def connect(host: HostProfile, accept_new_host: bool = False) -> Connection:
    """The host's pooled connection (a bad $DEVENV_SSH_KEY is bad input, said before any is tried)."""
    from devenv.remote.envkey import chosen_key
    from devenv.remote.pool import get_connection

    chosen_key()
    return get_connection(host, accept_new_host=accept_new_host)


def _places(profile: HostProfile, accept_new_host: bool) -> list[JobPlace] | None:
    """What the host's backend has the monitor watch: None for the host itself (also `auto`: a docker or bare
    host), else its places (a cluster's job nodes)."""
    from devenv.services.environments.registry import known_backend

    kind = known_backend(profile)
    return None if kind is None else kind.watched_places(lambda: connect(profile, accept_new_host), profile)


@dataclass(frozen=True)
class Source:
    name: str                        # the monitor's name: the host's, or cluster/job-J/node
    profile: HostProfile             # the host, or the cluster's login node
    place: JobPlace | None = None    # a node of a Slurm job
    fixed: HostSnapshot | None = None   # a cluster without a job, or one that could not be asked


def sources(host_profiles: list[HostProfile], accept_new_host: bool = False,
            codes: dict[str, int] | None = None) -> list[Source]:
    """Each profile as its source(s), in the order given; clusters asked in parallel (one squeue each). A
    cluster that cannot be asked is an error row (its exit code into codes), as an unreachable host is."""
    from devenv.services.environments.slurm.places import no_job_snapshot, waiting_jobs

    def expand(profile: HostProfile) -> list[Source]:
        try:
            places = _places(profile, accept_new_host)
        except DevenvError as e:
            if codes is not None:
                codes[profile.name] = e.exit_code
            return [Source(profile.name, profile, fixed=HostSnapshot(profile.name, ERROR, time.time(), e.message,
                                                                     e.hint))]
        if places is None:
            return [Source(profile.name, profile)]
        if not places:   # no job runs: one may be waiting in the queue (said with its reason and place)
            try:
                waiting = waiting_jobs(connect(profile, accept_new_host), profile)
            except DevenvError:
                waiting = []
            return [Source(profile.name, profile, fixed=no_job_snapshot(profile.name, waiting))]
        return [Source(p.name, profile, place=p) for p in places]

    with ThreadPoolExecutor(max_workers=min(8, len(host_profiles) or 1)) as pool:
        return [s for found in pool.map(expand, host_profiles) for s in found]


def sample_source_once(source: Source, accept_new_host: bool = False) -> HostSnapshot:
    """One look at a source (raises the connection's DevenvError for the caller's error row)."""
    from devenv.services.monitor import sample_once

    if source.fixed is not None:
        return source.fixed
    conn = connect(source.profile, accept_new_host)
    getattr(conn, "open", lambda: None)()  # connection errors here, with their own exit code
    if source.place is None:
        return sample_once(conn)
    from devenv.services.environments.slurm.places import node_connection

    return sample_once(node_connection(conn, source.place), place=source.place)


def sampler_for(source: Source, interval: float, accept_new_host: bool = False) -> HostSampler | FixedSampler:
    """The long-lived sampler of a source (not started): one stream per host, one per node of a job, each on
    a connection of its own to the login node (so that a stalled node's reconnect touches no other node)."""
    from devenv.services.environments.slurm.places import FixedSampler
    from devenv.services.monitor import HostSampler

    if source.fixed is not None:
        return FixedSampler(source.fixed)
    profile, place = source.profile, source.place
    factory: Callable[[], Connection]
    if place is None:
        def factory() -> Connection:
            return connect(profile, accept_new_host)
    else:
        from devenv.remote.pool import new_connection
        from devenv.services.environments.slurm.places import node_connection

        def factory() -> Connection:
            return node_connection(new_connection(profile, accept_new_host=accept_new_host), place, owns=True)
    return HostSampler(source.name, factory, interval=interval, place=place)


def jobs_json(snapshots: list[HostSnapshot]) -> list[dict[str, Any]]:
    """The --json grouping: one entry per Slurm job, with the monitor names of its nodes."""
    jobs: dict[tuple[str, str], dict[str, Any]] = {}
    for snap in snapshots:
        place = snap.job
        if place is None:
            continue
        entry = jobs.setdefault((place.cluster, place.job_id), {
            "cluster": place.cluster, "job_id": place.job_id, "job_name": place.job_name, "env": place.env,
            "time_left": place.time_left, "nodes": []})
        entry["nodes"].append({"node": place.node, "host": snap.host, "state": snap.state,
                               "gpus": len(snap.gpus)})
    return list(jobs.values())


@dataclass(frozen=True)
class SourceChanges:
    """What a look at the clusters again found: new sources (nodes of jobs started since), the snapshots of
    nodes whose job ended, and the names of rows to drop (a cluster's "no job" row, once one runs)."""
    added: list[Source]
    ended: list[HostSnapshot]
    gone: list[str]


class SourceFollower:
    """The clusters among the sources, each followed by a JobWatch on its login node's connection: so that a
    long-running monitor shows a job started after it, and marks one that ended (environments/slurm/places)."""

    def __init__(self, found: list[Source], accept_new_host: bool = False, watches: dict[str, JobWatch] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        from devenv.services.environments.slurm.places import JobWatch

        self._clock = clock
        self._ended_at: dict[str, tuple[str, float]] = {}    # an ended node's row: (its cluster, when it ended)
        self._no_job = {s.profile.name for s in found if s.fixed is not None and s.fixed.state in
                        ("no-job", "job-pending")}
        clusters = {s.profile.name: s.profile for s in found if s.place is not None or s.profile.name in self._no_job}
        self._profiles = clusters

        def lister(profile: HostProfile) -> Callable[[], list[JobPlace]]:
            return lambda: _places(profile, accept_new_host) or []

        self._watches = watches if watches is not None else {
            name: JobWatch(lister(profile), [s.place for s in found if s.place is not None and s.profile.name == name])
            for name, profile in clusters.items()}

    def __bool__(self) -> bool:
        return bool(self._watches)

    def refresh(self) -> SourceChanges:
        """Nodes of new jobs; ended jobs' nodes as job-ended rows, which go ENDED_KEEP_S later; a cluster's
        no-job row, gone while a job runs and back once no job runs and no ended row is left."""
        from devenv.services.environments.slurm.places import ENDED_KEEP_S, ended_snapshot, no_job_snapshot

        added: list[Source] = []
        ended: list[HostSnapshot] = []
        gone: list[str] = []
        now = self._clock()
        for name, watch in self._watches.items():
            try:
                changes = watch.refresh()
            except DevenvError:
                continue    # a failed look (a busy slurmctld, a lost connection) changes nothing
            added += [Source(p.name, self._profiles[name], place=p) for p in changes.added]
            ended += [ended_snapshot(p) for p in changes.ended]
            self._ended_at.update({p.name: (name, now) for p in changes.ended})
            if changes.added and name in self._no_job:
                self._no_job.discard(name)
                gone.append(name)
        for host, (_, at) in list(self._ended_at.items()):
            if now - at >= ENDED_KEEP_S:
                del self._ended_at[host]
                gone.append(host)
        kept = {cluster for cluster, _ in self._ended_at.values()}
        for name, watch in self._watches.items():
            if name not in self._no_job and name not in kept and not watch.running:
                self._no_job.add(name)
                added.append(Source(name, self._profiles[name], fixed=no_job_snapshot(name)))
        return SourceChanges(added, ended, gone)


class SamplerFollower:
    """Keeps the streams' SamplerSet (services/monitor_stream: what --watch --json and --prometheus read) in
    step with the clusters' jobs, every FOLLOW_EVERY_S on a daemon thread, as the TUI's follow worker does:
    a new job's nodes get a started sampler (sampler_factory, sampler_for in the CLI), an ended job's nodes a
    FixedSampler of their job-ended snapshot (their streams stopped) and later go, and a cluster's no-job row
    goes while a job runs. A failed look (SourceFollower skips it) changes nothing."""

    def __init__(self, follower: SourceFollower, live: SamplerSet, sampler_factory: Callable[[Source], Any],
                 every: float | None = None):
        from devenv.services.environments.slurm.places import FOLLOW_EVERY_S

        self._follower, self._live, self._factory = follower, live, sampler_factory
        self._every = FOLLOW_EVERY_S if every is None else every
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def apply(self, changes: SourceChanges) -> None:
        from devenv.services.environments.slurm.places import FixedSampler

        for host in changes.gone:
            old = self._live.pop(host)
            if old is not None:
                old.stop(timeout=0)
        for snapshot in changes.ended:
            old = self._live.put(FixedSampler(snapshot))   # in its place first: readers never see "stopped"
            if old is not None:
                old.stop(timeout=0)
        for source in changes.added:
            sampler = self._factory(source)
            sampler.start()
            old = self._live.put(sampler)
            if old is not None:
                old.stop(timeout=0)

    def follow_once(self) -> SourceChanges:
        changes = self._follower.refresh()
        self.apply(changes)
        return changes

    def start(self) -> SamplerFollower:
        if self._follower and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="monitor-follow-jobs", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            self.follow_once()     # a failed look is skipped inside (SourceFollower.refresh)
