"""The GPU sampler behind `devenv monitor` (L2): per host, two long-lived streams over one connection.

- GPU stream: one `nvidia-smi --query-gpu=... -lms <interval>` process on the host for as long as we watch
  (never one process per sample). Every line is stamped with our clock when it arrives.
- Process stream: one shell loop on the host that, every few seconds, lists compute processes, their users
  (one `ps`) and their cgroups (read by the shell), framed by @apps/@end lines.

When the connection drops, or the stream goes silent for too long (a laptop that slept, a dead network), the
sampler records a Gap, reconnects with exponential backoff and keeps the gap in each GPU's history, so the
UI can show it instead of drawing over it. A host without nvidia-smi is in state "no-gpu", said plainly.

This module never builds a connection: it is handed a factory (devenv.remote.pool.get_connection in the CLI).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace

from devenv.errors import ConnectError, DevenvError, HostKeyError
from devenv.gpu.nvsmi import CALL, explain_failure, preamble
from devenv.gpu.sample import (
    APPS_BEGIN,
    APPS_END,
    FIELD_ALIASES,
    GPU_FIELDS,
    AppsFrame,
    Gap,
    GpuHistory,
    GpuSample,
    HostStats,
    ProcessSample,
    apps_pids_script,
    apps_query_command,
    cpu_busy_pct,
    gpu_query_command,
    invalid_field,
    parse_apps_frame,
    parse_gpu_line,
    pmon_batches_script,
    with_sm,
)
from devenv.remote.base import Connection, Result

# Host states, in the words the UI shows (no-job: a Slurm cluster where none of the user's devenv jobs runs;
# job-pending: none runs but one waits in the queue, said with Slurm's reason; job-ended: a node of a job that
# ran when the monitor looked before, and no longer does).
CONNECTING, OK, NO_GPU, RECONNECTING, ERROR, STOPPED, NO_JOB, JOB_ENDED, JOB_PENDING = (
    "connecting", "ok", "no-gpu", "reconnecting", "error", "stopped", "no-job", "job-ended", "job-pending")


class NoGpu(DevenvError):
    """nvidia-smi is missing or sees no GPU: an honest state of the host, not a connection problem."""


@dataclass(frozen=True)
class JobPlace:
    """Where a monitored "host" is when it is one node of a Slurm job: the snapshots of one job's nodes share
    cluster and job_id, which is how every front end groups them (environments/slurm/places finds them)."""

    cluster: str
    job_id: str
    job_name: str
    node: str
    nodes: tuple[str, ...] = ()     # every node of the job
    env: str | None = None          # the devenv environment the job runs, when it is one
    time_left: str | None = None

    @property
    def name(self) -> str:
        """The monitor's name for this node: cluster/job-J/node."""
        return f"{self.cluster}/job-{self.job_id}/{self.node}"

    def describe(self) -> str:
        what = f"env {self.env}" if self.env else self.job_name
        left = f", {self.time_left} left" if self.time_left else ""
        return (f"Slurm job {self.job_id} ({what}{left}) on {self.cluster}: node {self.node}"
                + (f" of {', '.join(self.nodes)}" if len(self.nodes) > 1 else ""))

    def to_dict(self) -> dict[str, object]:
        return {"cluster": self.cluster, "job_id": self.job_id, "job_name": self.job_name, "node": self.node,
                "nodes": list(self.nodes), "env": self.env, "time_left": self.time_left}


@dataclass(frozen=True)
class HostSnapshot:
    """What the UI draws for one host; immutable, so a worker can hand it to the UI thread as is."""

    host: str
    state: str
    t: float
    message: str | None = None
    hint: str | None = None
    gpus: tuple[GpuSample, ...] = ()
    history: dict[int, tuple[GpuSample | Gap, ...]] = field(default_factory=dict)   # gpu index -> its points
    processes: tuple[ProcessSample, ...] = ()
    processes_t: float | None = None
    processes_error: str | None = None
    sm_error: str | None = None     # why the processes have no SM % (nvidia-smi pmon's message)
    gaps: tuple[Gap, ...] = ()
    last_sample_t: float | None = None
    samples: int = 0
    reconnects: int = 0
    next_retry_t: float | None = None
    fields_missing: tuple[str, ...] = ()
    login_user: str | None = None   # who the process stream runs as: other users' processes are marked
    host_stats: HostStats | None = None   # the host line: CPU, memory, load, disk of the workspaces
    job: JobPlace | None = None           # a node of a Slurm job: which job, which node

    @property
    def driver_version(self) -> str | None:
        return next((g.driver_version for g in self.gpus if g.driver_version), None)

    @property
    def open_gap(self) -> Gap | None:
        return self.gaps[-1] if self.gaps and self.gaps[-1].end is None else None

    def processes_on(self, gpu: GpuSample) -> list[ProcessSample]:
        return [p for p in self.processes if p.gpu_uuid and p.gpu_uuid == gpu.uuid]

    def to_dict(self, with_history: bool = False) -> dict[str, object]:
        data: dict[str, object] = {
            "host": self.host, "state": self.state, "time": self.t, "message": self.message, "hint": self.hint,
            "driver_version": self.driver_version, "last_sample_time": self.last_sample_t,
            "samples": self.samples, "reconnects": self.reconnects,
            "gpus": [g.to_dict() for g in self.gpus],
            "processes": [p.to_dict() for p in self.processes],
            "processes_time": self.processes_t, "processes_error": self.processes_error,
            "sm_error": self.sm_error,
            "gaps": [g.to_dict() for g in self.gaps], "fields_missing": list(self.fields_missing),
            "login_user": self.login_user,
            "host_stats": self.host_stats.to_dict() if self.host_stats else None,
            "job": self.job.to_dict() if self.job else None,
        }
        if with_history:
            data["history"] = {str(i): [p.to_dict() for p in pts] for i, pts in self.history.items()}
        return data


# --- commands -------------------------------------------------------------------------------------------

def apps_loop_script(nvidia_smi: str = "nvidia-smi", every_s: float = 5.0, once: bool = False) -> str:
    """The process stream: one POSIX shell loop. Per frame it starts nvidia-smi and, if there are GPU
    processes, one ps and one `nvidia-smi pmon -c 1` per 4 GPUs that have them (their SM %); cgroups are read
    with the shell's own `read`, without starting anything. No frame opens an SSH session."""
    # CPU % is the busy share of /proc/stat's jiffies between two readings: a stream takes them a frame apart,
    # a one-shot look at the start and the end of its frame (half a second apart at least).
    first_cpu = "  read -r _ cpu0 < /proc/stat\n" if once else ""
    echo_first_cpu = '  echo "@cpu $cpu0"\n' if once else ""
    settle = "  sleep 0.5 2>/dev/null || sleep 1\n" if once else ""
    return preamble(nvidia_smi) + f"""\
while :; do
{first_cpu}  out=$({apps_query_command(CALL)} 2>&1)
  echo "{APPS_BEGIN} $?"
{echo_first_cpu}  echo "@me ${{USER:-$(id -un)}}"
  [ -n "$out" ] && printf '%s\\n' "$out"
{apps_pids_script("  ", uuids=True)}
  if [ -n "$pids" ]; then
    ps -ww -o pid=,user:32=,pcpu=,rss=,etimes=,args= -p "$pids" 2>/dev/null |
      while read -r p u c r e a; do echo "@ps $p $u $c $r $e $a"; done
    for p in $pids; do
      while read -r l; do echo "@cgroup $p $l"; done < /proc/$p/cgroup
    done 2>/dev/null
{pmon_batches_script(CALL, "    ", line_prefix="@pm ")}
  fi
  read -r l1 l5 l15 _ < /proc/loadavg && echo "@load $l1 $l5 $l15 $(getconf _NPROCESSORS_ONLN)"
  while read -r k v _; do
    case $k in MemTotal:|MemAvailable:|SwapTotal:|SwapFree:) echo "@mem $k $v" ;; esac
  done < /proc/meminfo
{settle}  read -r _ cpu < /proc/stat && echo "@cpu $cpu"
  for d in /var/lib/docker "$HOME" /; do
    [ -d "$d" ] && df -Pk "$d" | tail -n 1 |
      {{ read -r _ size used _ _ mnt; echo "@disk $size $used - $mnt"; }} && break
  done
  echo {APPS_END}
  {"break" if once else f"sleep {every_s:g}"}
done"""


def read_apps_frames(lines: Iterator[str]) -> Iterator[AppsFrame]:
    """Frames out of the process stream's lines (anything outside @apps ... @end is ignored)."""
    frame: list[str] | None = None
    for line in lines:
        if line.startswith(APPS_BEGIN):
            frame = [line]
        elif line.strip() == APPS_END:
            if frame is not None:
                yield parse_apps_frame(frame)
            frame = None
        elif frame is not None:
            frame.append(line)


def negotiate_fields(conn: Connection, nvidia_smi: str = "nvidia-smi", timeout: float = 30,
                     clock: Callable[[], float] = time.time) -> tuple[tuple[str, ...], list[GpuSample]]:
    """Run the GPU query once: the fields this driver accepts (an unknown one is renamed to its old alias or
    dropped, so its column is NA) and the first samples. Raises NoGpu or DevenvError."""
    fields = list(GPU_FIELDS)
    for _ in range(len(GPU_FIELDS)):
        result = conn.run(preamble(nvidia_smi) + gpu_query_command(fields, CALL), timeout=timeout)
        if result.ok:
            t = clock()
            samples = [s for s in (parse_gpu_line(line, t, tuple(fields)) for line in result.stdout.splitlines())
                       if s is not None]
            if not samples:
                raise NoGpu(f"{conn.name}: nvidia-smi lists no GPU", "check `nvidia-smi -L` on the host")
            return tuple(fields), samples
        bad = invalid_field(result.stdout + result.stderr)
        if result.exit_code == 2 and bad in fields:
            alias = FIELD_ALIASES.get(bad)
            if alias and alias not in fields:
                fields[fields.index(bad)] = alias
            else:
                fields.remove(bad)
            continue
        raise _failure(conn.name, result)
    raise DevenvError(f"{conn.name}: nvidia-smi rejects every field we ask for", "run nvidia-smi on the host")


def _failure(host: str, result: Result) -> DevenvError:
    what, hint = explain_failure((result.stdout + "\n" + result.stderr).strip(), result.exit_code)
    no_gpu = result.exit_code in (127, 6, 9) or "not found" in what or "sees no GPU" in what or "no NVIDIA" in what
    return (NoGpu if no_gpu else DevenvError)(f"{host}: {what}", hint)


def gpu_stream_command(fields: tuple[str, ...], interval: float, nvidia_smi: str = "nvidia-smi") -> str:
    # exec: the login shell becomes nvidia-smi, so the stream is exactly one process on the host.
    return f"{preamble(limit_s=None)}exec {gpu_query_command(fields, nvidia_smi)} -lms {max(int(interval * 1000), 100)}"


def container_names(conn: Connection, timeout: float = 15) -> dict[str, str]:
    """Short container id -> name, from `docker ps` (else `podman ps`) on the host ({} when neither answers)."""
    try:
        result = conn.run("docker ps --no-trunc --format '{{.ID}} {{.Names}}' 2>/dev/null || "
                          "podman ps --no-trunc --format '{{.ID}} {{.Names}}'", timeout=timeout)
    except DevenvError:
        return {}
    names = {}
    for line in result.stdout.splitlines() if result.ok else ():
        parts = line.split()
        if len(parts) == 2:
            names[parts[0][:12]] = parts[1]
    return names


def sample_once(conn: Connection, *, nvidia_smi: str = "nvidia-smi", timeout: float = 30,
                clock: Callable[[], float] = time.time, place: JobPlace | None = None) -> HostSnapshot:
    """One look at a host (for `devenv monitor --once`): GPUs, processes with users and containers.
    place: the Slurm job node conn reaches (a schedulers.slurm_step.StepConnection), kept in the snapshot."""
    snap = _sample_once(conn, nvidia_smi, timeout, clock)
    return replace(snap, job=place) if place is not None else snap


def _sample_once(conn: Connection, nvidia_smi: str, timeout: float, clock: Callable[[], float]) -> HostSnapshot:
    host = conn.name
    try:
        fields, gpus = negotiate_fields(conn, nvidia_smi, timeout, clock)
    except NoGpu as e:  # no GPU to show, but the host line still tells how the host itself is doing
        return HostSnapshot(host, NO_GPU, clock(), e.message, e.hint, host_stats=_host_stats_once(conn, timeout))
    except DevenvError as e:
        return HostSnapshot(host, ERROR, clock(), e.message, e.hint)
    processes: tuple[ProcessSample, ...] = ()
    apps_t, apps_error = None, None
    login_user, host_stats, sm_error = None, None, None
    try:
        result = conn.run(apps_loop_script(nvidia_smi, once=True), timeout=timeout)
        apps_t = clock()
        frames = list(read_apps_frames(iter(result.stdout.splitlines())))
        if frames:
            processes, apps_error = _named(conn, frames[-1].processes, {}), frames[-1].error
            processes = with_sm(processes, frames[-1].sm, {g.uuid: g.index for g in gpus}, frames[-1].membw)
            login_user, host_stats, sm_error = frames[-1].me, frames[-1].host, frames[-1].sm_error
    except DevenvError as e:
        apps_error = e.message
    missing = tuple(f for f in GPU_FIELDS if f not in fields and FIELD_ALIASES.get(f) not in fields)
    return HostSnapshot(host, OK, clock(), gpus=tuple(gpus), processes=tuple(processes), processes_t=apps_t,
                        processes_error=apps_error, sm_error=sm_error, last_sample_t=gpus[0].t, samples=len(gpus),
                        fields_missing=missing, login_user=login_user, host_stats=host_stats)


def _host_stats_once(conn: Connection, timeout: float) -> HostStats | None:
    """The host line of a host without a GPU: the process loop's one frame (its nvidia-smi fails; the /proc
    readings do not need it). None when the host could not be asked."""
    try:
        result = conn.run(apps_loop_script(once=True), timeout=timeout)
    except DevenvError:
        return None
    frames = list(read_apps_frames(iter(result.stdout.splitlines())))
    return frames[-1].host if frames else None


def _named(conn: Connection, processes: Iterable[ProcessSample], cache: dict[str, str]) -> tuple[ProcessSample, ...]:
    """Container ids replaced by names, asking docker only when an id is new."""
    ids = {p.container for p in processes if p.container}
    if ids - cache.keys():
        found = container_names(conn)
        for cid in ids:
            cache[cid] = found.get(cid, cid)
    return tuple(replace(p, container=cache[p.container]) if p.container else p for p in processes)


# --- the long-lived sampler -----------------------------------------------------------------------------

class HostSampler:
    """Samples one host in two daemon threads until stop(). Thread-safe snapshot() for the UI."""

    def __init__(self, host: str, conn_factory: Callable[[], Connection], *, interval: float = 1.0,
                 process_interval: float = 5.0, history: int = 300, nvidia_smi: str = "nvidia-smi",
                 stall_after: float | None = None, backoff_initial: float = 1.0, backoff_max: float = 30.0,
                 no_gpu_retry: float = 60.0, clock: Callable[[], float] = time.time,
                 place: JobPlace | None = None):
        self.host = host
        self.place = place          # a node of a Slurm job (conn_factory gives a StepConnection to it)
        self.interval = interval
        self.process_interval = process_interval
        self.nvidia_smi = nvidia_smi
        # A healthy stream prints every interval; silence this long means the link is dead without saying so.
        self.stall_after = stall_after or max(5 * interval, 10.0)
        self.backoff_initial, self.backoff_max, self.no_gpu_retry = backoff_initial, backoff_max, no_gpu_retry
        self._factory = conn_factory
        self._clock = clock
        self._history_len = history
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._streaming = threading.Event()     # set while the GPU stream runs: the process stream follows it
        self._host_only = threading.Event()     # set while the host has no GPU: the process stream still runs
        self._conn: Connection | None = None
        self._threads: list[threading.Thread] = []
        self._names: dict[str, str] = {}
        # state below is guarded by _lock
        self._version = 0
        self._state = CONNECTING
        self._message: str | None = None
        self._hint: str | None = None
        self._latest: dict[int, GpuSample] = {}
        self._histories: dict[int, GpuHistory] = {}
        self._processes: tuple[ProcessSample, ...] = ()
        self._login_user: str | None = None
        self._host_stats: HostStats | None = None
        self._processes_t: float | None = None
        self._processes_error: str | None = None
        self._sm_error: str | None = None
        self._gaps: list[Gap] = []
        self._last_sample_t: float | None = None
        self._last_line_t: float | None = None
        self._samples = 0
        self._reconnects = 0
        self._next_retry_t: float | None = None
        self._fields: tuple[str, ...] = GPU_FIELDS

    # --- public -----------------------------------------------------------------------------------------

    def start(self) -> HostSampler:
        for target, name in ((self._gpu_loop, "gpu"), (self._apps_loop, "apps"), (self._watchdog, "watchdog")):
            thread = threading.Thread(target=target, name=f"monitor-{self.host}-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self, timeout: float = 3.0) -> None:
        """Stop sampling. Closing the connection ends both remote processes (they die on their next write)."""
        self._stop.set()
        self._drop_connection()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        with self._changed:
            self._state = STOPPED
            self._bump()

    def snapshot(self) -> HostSnapshot:
        with self._lock:
            return self._snapshot_locked()

    def wait_for_update(self, version: int, timeout: float) -> tuple[int, HostSnapshot]:
        """Block until the state changed past `version` (or timeout); return (new version, snapshot)."""
        with self._changed:
            if self._version == version:
                self._changed.wait(timeout)
            return self._version, self._snapshot_locked()

    # --- threads ----------------------------------------------------------------------------------------

    def _gpu_loop(self) -> None:
        attempt = 0
        while not self._stop.is_set():
            lost = True  # whether the connection itself is suspect (then it is closed before retrying)
            try:
                conn = self._connection()
                fields, first = negotiate_fields(conn, self.nvidia_smi, clock=self._clock)
                with self._changed:
                    self._fields = fields
                    for first_sample in first:
                        self._add_sample(first_sample)
                    self._set_state(OK)
                self._host_only.clear()
                self._streaming.set()
                stream = conn.stream(gpu_stream_command(fields, self.interval, self.nvidia_smi))
                try:
                    for line in stream:
                        if self._stop.is_set():
                            break
                        sample = parse_gpu_line(line, self._clock(), fields)
                        if sample is not None:
                            with self._changed:
                                self._add_sample(sample)
                                self._bump()
                            attempt = 0
                finally:
                    stream.close()  # kills the remote nvidia-smi if we leave early
                reason, lost = "the nvidia-smi stream ended", False
            except NoGpu as e:
                self._streaming.clear()
                self._host_only.set()
                with self._changed:
                    self._set_state(NO_GPU, e.message, e.hint)
                self._stop.wait(self.no_gpu_retry)  # a driver may be installed or reloaded meanwhile
                continue
            except HostKeyError as e:  # retrying cannot help: the user must check the key
                with self._changed:
                    self._set_state(ERROR, e.message, e.hint)
                return
            except ConnectError as e:
                reason = e.message.split(" while running:")[0]  # the command line is noise here
            except DevenvError as e:  # nvidia-smi failed or timed out on a live connection
                reason, lost = e.message, False
            except Exception as e:  # paramiko/socket errors that escaped the adapter: still a drop, not a crash
                reason = f"{type(e).__name__}: {e}"
            self._streaming.clear()
            if self._stop.is_set():
                return
            delay = min(self.backoff_initial * 2 ** attempt, self.backoff_max)
            attempt += 1
            with self._changed:
                if self._stalled_reason:
                    reason, self._stalled_reason, lost = self._stalled_reason, None, True
                if self._samples:
                    self._open_gap(reason)
                self._next_retry_t = self._clock() + delay
                self._set_state(RECONNECTING if self._samples else ERROR, reason, f"retrying in {delay:.1f} s")
            if lost:
                self._drop_connection()
            self._stop.wait(delay)

    _stalled_reason: str | None = None

    def _apps_loop(self) -> None:
        """The process stream; on a host without a GPU (NO_GPU) it runs too, for the host line."""
        while not self._stop.is_set():
            if not self._streaming.wait(0.5) and not self._host_only.is_set():
                continue
            try:
                conn = self._connection()
                stream = conn.stream(apps_loop_script(self.nvidia_smi, self.process_interval))
                try:
                    for frame in read_apps_frames(stream):
                        if self._stop.is_set():
                            break
                        processes = _named(conn, frame.processes, self._names)
                        with self._changed:
                            index_of = {g.uuid: g.index for g in self._latest.values()}
                            self._processes = with_sm(processes, frame.sm, index_of, frame.membw)
                            self._processes_error, self._sm_error = frame.error, frame.sm_error
                            self._login_user = frame.me or self._login_user
                            if frame.host is not None:
                                before = self._host_stats.cpu_jiffies if self._host_stats else ()
                                self._host_stats = replace(frame.host, cpu_pct=cpu_busy_pct(
                                    before, frame.host.cpu_jiffies) if frame.host.cpu_pct is None
                                    else frame.host.cpu_pct)
                            self._processes_t = self._clock()
                            self._bump()
                finally:
                    stream.close()
            except Exception as e:  # the GPU loop owns reconnecting; here we only note it and wait
                with self._changed:
                    self._processes_error = getattr(e, "message", None) or f"{type(e).__name__}: {e}"
                    self._bump()
            self._stop.wait(min(self.process_interval, 2.0))

    def _watchdog(self) -> None:
        """Silence on a live-looking stream (no RST ever comes from a suspended laptop's peer): drop it."""
        tick = min(self.interval, 1.0)
        while not self._stop.wait(tick):
            if not self._streaming.is_set():
                continue
            with self._lock:
                last = self._last_line_t
            if last is not None and self._clock() - last > self.stall_after:
                with self._lock:
                    self._stalled_reason = f"no sample for {self.stall_after:.0f} s (stream stalled)"
                    self._last_line_t = None
                self._drop_connection()

    # --- helpers ----------------------------------------------------------------------------------------

    def _connection(self) -> Connection:
        with self._lock:
            if self._conn is None:
                self._conn = self._factory()
            return self._conn

    def _drop_connection(self) -> None:
        with self._lock:
            conn = self._conn
        if conn is not None:
            try:
                conn.close()  # an SSH connection reopens on its next command
            except Exception:
                pass

    def _add_sample(self, sample: GpuSample) -> None:
        key = sample.index if sample.index is not None else -1
        history = self._histories.get(key)
        if history is None:
            history = self._histories[key] = GpuHistory(self._history_len)
        gap = self._close_gap(sample.t)
        if gap is not None:
            for h in self._histories.values():
                h.add_gap(gap)
        history.add(sample)
        self._latest[key] = sample
        self._last_sample_t = self._last_line_t = sample.t
        self._samples += 1

    def _open_gap(self, reason: str) -> None:
        if self._gaps and self._gaps[-1].end is None:
            return  # still in the same gap: keep its start and first reason
        start = self._last_sample_t if self._last_sample_t is not None else self._clock()
        self._gaps.append(Gap(start, None, reason))
        self._gaps = self._gaps[-50:]

    def _close_gap(self, now: float) -> Gap | None:
        if not self._gaps or self._gaps[-1].end is not None:
            return None
        closed = replace(self._gaps[-1], end=now)
        self._gaps[-1] = closed
        self._reconnects += 1
        self._next_retry_t = None
        return closed

    def _set_state(self, state: str, message: str | None = None, hint: str | None = None) -> None:
        self._state, self._message, self._hint = state, message, hint
        self._bump()

    def _bump(self) -> None:
        self._version += 1
        self._changed.notify_all()

    def _snapshot_locked(self) -> HostSnapshot:
        gpus = tuple(self._latest[k] for k in sorted(self._latest))
        missing = tuple(f for f in GPU_FIELDS if f not in self._fields and FIELD_ALIASES.get(f) not in self._fields)
        return HostSnapshot(
            host=self.host, state=self._state, t=self._clock(), message=self._message, hint=self._hint,
            gpus=gpus, history={k: tuple(h.points) for k, h in self._histories.items()},
            processes=self._processes, processes_t=self._processes_t, processes_error=self._processes_error,
            sm_error=self._sm_error,
            gaps=tuple(self._gaps), last_sample_t=self._last_sample_t, samples=self._samples,
            reconnects=self._reconnects, next_retry_t=self._next_retry_t, fields_missing=missing,
            login_user=self._login_user, host_stats=self._host_stats, job=self.place,
        )


# --- acting on a process (the TUI's kill key) -----------------------------------------------------------

SIGNALS = ("TERM", "KILL")


def kill_process(conn: Connection, pid: int, signal: str = "TERM", *, expect_command: str | None = None,
                 timeout: float = 15) -> str:
    """Send SIGTERM/SIGKILL to pid on the host, only if it is the login user's own (any process for root) and,
    when expect_command is given, still runs that command (a pid reused meanwhile is left alone)."""
    if signal not in SIGNALS or not isinstance(pid, int) or isinstance(pid, bool) or pid <= 1:
        raise DevenvError(f"will not send {signal!r} to pid {pid!r}", "a process id > 1 and TERM or KILL")
    check = ""
    if expect_command:
        # the first word of its command line, compared by the shell (never put in the script)
        check = ('cmd=$(tr "\\0" " " < /proc/$pid/cmdline 2>/dev/null); '
                 'case "$cmd" in "$DEVENV_EXPECT"*) ;; *) echo "pid $pid now runs something else"; exit 5;; esac; ')
    script = (f'pid={pid}; [ -d /proc/$pid ] || {{ echo "no process $pid (it has ended)"; exit 3; }}; '
              'owner=$(stat -c %U /proc/$pid); me=$(id -un); '
              '[ "$(id -u)" = 0 ] || [ "$owner" = "$me" ] || { echo "pid $pid belongs to $owner, not $me"; exit 4; }; '
              f'{check}kill -s {signal} $pid && echo "sent SIG{signal} to $pid ($owner)"')
    env = {"DEVENV_EXPECT": expect_command.split()[0]} if expect_command else None
    result = conn.run(script, timeout=timeout, env=env)
    said = (result.stdout.strip() or result.stderr.strip()).splitlines()
    if result.ok:
        return said[-1] if said else f"sent SIG{signal} to {pid}"
    hint = {4: "only your own processes can be stopped (unless you log in as root)",
            3: "the list is a few seconds old", 5: "the list is a few seconds old; look again"}.get(
        result.exit_code, "run `kill` on the host by hand to see why")
    raise DevenvError(f"{conn.name}: {said[-1] if said else f'kill exited {result.exit_code}'}", hint)
