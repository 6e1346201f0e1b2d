"""The autostop watcher: a self-contained, stdlib-only program devenv copies to the GPU host and starts detached
beside the environment (services/environments/autostop.py arms it), so that an idle environment stops itself with
the laptop closed. `python3 autostop_watcher.py CONFIG.json` (the config is 0600, written by devenv; nothing of it
is ever on a command line).

Every `interval_s` it takes one sample of each signal; the environment is idle only while ALL of them say idle:
  sessions  no ssh/exec session into the environment (an sshd session process with a child, a `docker exec`)
  runs      no detached run running (runs_dir/*/state.json says "running" and its pid lives)
  jupyter   no kernel busy, no kernel or terminal activity since the last sample (Jupyter's own API)
  gpu       every one of the environment's GPUs under gpu_threshold % (one nvidia-smi per sample; no CUDA)
A signal that cannot be read is "unknown" and holds the clock like activity: nvidia-smi failing never stops a
busy environment. Idle time accrues on the MONOTONIC clock, and a gap between samples longer than two intervals
(the watcher was starved, the host slept) adds at most two intervals: a clock jump never stops anything.
Once idle for idle_s: the hook (if any) runs, then the action (stop or down); the state file says why.

In a Slurm job (`autostop_watcher.py --in-job FOLDER JUPYTER_PID`) the job's launcher starts it on the job's
node beside Jupyter; it waits there for `up --autostop` to arm it (FOLDER/config.json naming this job, on the
shared file system), and ends the job itself when idle (its Jupyter, the batch step, is ended; else scancel).

The judging logic (Judge, the parsers, the pure signal readers over /proc snapshots) is importable and tested
without a host (tests/test_autostop_watcher.py); main() is the only part that touches the machine.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

SCHEMA = 1
NVIDIA_SMI_QUERY = ["--query-gpu=index,utilization.gpu", "--format=csv,noheader,nounits"]
ACTIVE, IDLE, UNKNOWN, ABSENT, SKIPPED = "active", "idle", "unknown", "absent", "skipped"


# --- the decision -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Signal:
    """One signal's reading: active, idle, unknown (could not be read: holds the clock) or absent (the env has
    no such thing: no GPUs, no Jupyter), with what was seen, for status."""

    state: str
    said: str = ""

    @property
    def holds(self) -> bool:
        return self.state in (ACTIVE, UNKNOWN)


@dataclass
class Judge:
    """The idle clock: idle_for grows only across samples where no signal holds it, on the monotonic clock."""

    idle_s: float
    interval_s: float
    idle_for: float = 0.0
    last: float | None = None            # the monotonic time of the previous sample
    held_by: list[str] = field(default_factory=list)

    def observe(self, now: float, signals: dict[str, Signal]) -> bool:
        """Take one sample's signals at monotonic `now`; True once idle for the whole window."""
        gap = 0.0 if self.last is None else max(0.0, now - self.last)
        self.last = now
        self.held_by = [name for name, sig in signals.items() if sig.holds]
        if self.held_by:
            self.idle_for = 0.0
        else:   # a long gap is time nobody looked at: it counts for at most two intervals
            self.idle_for += min(gap, 2 * self.interval_s)
        return self.idle_for >= self.idle_s

    @property
    def stops_in(self) -> float:
        return max(0.0, self.idle_s - self.idle_for)


@dataclass
class GpuSeconds:
    """GPU-seconds since the watcher started: each GPU's share of each sample gap, active or idle by threshold."""

    active: float = 0.0
    idle: float = 0.0

    def add(self, gap: float, utilizations: list[float] | None, threshold: float) -> None:
        if not utilizations or gap <= 0:
            return
        busy = sum(1 for u in utilizations if u >= threshold)
        self.active += gap * busy
        self.idle += gap * (len(utilizations) - busy)


# --- the signals, pure over what was read ---------------------------------------------------------------------


def parse_gpu_utilization(text: str, gpus: str) -> dict[int, float]:
    """{index: utilization %} of `nvidia-smi --query-gpu=index,utilization.gpu --format=csv,noheader,nounits`,
    only the environment's GPUs (gpus: "all" or "0,2"). A field nvidia-smi cannot read ([N/A]) raises
    ValueError: the signal is unknown then, never idle."""
    wanted = None if gpus == "all" else {int(g) for g in gpus.split(",") if g.strip()}
    found: dict[int, float] = {}
    for line in text.strip().splitlines():
        index_text, _, util_text = line.partition(",")
        index = int(index_text.strip())
        if wanted is not None and index not in wanted:
            continue
        found[index] = float(util_text.strip().rstrip("%").strip())
    if not found or (wanted is not None and set(found) != wanted):
        raise ValueError(f"nvidia-smi shows none of GPU {gpus}" if not found else
                         f"nvidia-smi lacks GPU {','.join(str(g) for g in sorted(wanted - set(found)))}"
                         if wanted else "no GPU")
    return found


def gpu_signal(utilization: dict[int, float] | None, error: str, threshold: float) -> Signal:
    if utilization is None:
        return Signal(UNKNOWN, error or "nvidia-smi gave nothing")
    busy = {i: u for i, u in utilization.items() if u >= threshold}
    shown = ", ".join(f"GPU {i} {u:.0f}%" for i, u in sorted(utilization.items()))
    return Signal(ACTIVE if busy else IDLE, shown)


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    uid: int
    cmd: str                 # argv joined by spaces (an sshd session's title: "sshd: alice@pts/0")
    cgroup: str = ""
    ns_pid: int = 0          # its pid in its own pid namespace (1: a container's init)
    cwd: str = ""            # its working directory ("" where it cannot be read)


def sessions_in_container(procs: list[Proc], container_id: str) -> list[Proc]:
    """Sessions into a container: its sshd's session processes that run something, and `docker exec`
    processes (in the container's cgroup, their parent outside it, not its init)."""
    inside = {p.pid: p for p in procs if container_id and container_id in p.cgroup}
    parents = {p.ppid for p in procs}
    found = []
    for p in inside.values():
        if (_sshd_session(p) and p.pid in parents) or (p.ppid not in inside and p.ns_pid != 1):
            found.append(p)
    return found


def sessions_on_host(procs: list[Proc], uid: int, exclude: set[int], workspace: str = "") -> list[Proc]:
    """Sessions of a user on a bare host: their sshd session processes that run something (a shell, an exec'd
    command); a connection that only forwards ports (a tunnel to Jupyter) runs nothing and does not count. With
    a workspace, only sessions into this environment count: one that runs something in the workspace (devenv
    exec runs there; so does a shell that cd's there), not the same user's other logins to the host."""
    children: dict[int, list[int]] = {}
    for p in procs:
        children.setdefault(p.ppid, []).append(p.pid)
    by_pid = {p.pid: p for p in procs}
    root = workspace.rstrip("/")

    def in_workspace(pid: int) -> bool:
        todo, seen = list(children.get(pid, [])), set()
        while todo:
            child = todo.pop()
            if child in seen or child in exclude:
                continue
            seen.add(child)
            cwd = by_pid[child].cwd if child in by_pid else ""
            if cwd == root or cwd.startswith(root + "/"):
                return True
            todo += children.get(child, [])
        return False

    return [p for p in procs if p.uid == uid and _sshd_session(p) and p.pid not in exclude
            and any(c not in exclude for c in children.get(p.pid, []))
            and (not root or in_workspace(p.pid))]


# the tasks of a job's steps that are no session: the login node's relay to Jupyter (slurm_job.RELAY), a detached
# run's supervisor (counted as a run), and this watcher
_NOT_SESSIONS = ("import json,os,socket,sys,select,time", "supervise.sh", "autostop_watcher")


def sessions_in_job(procs: list[Proc], job_id: str,
                    environ: Callable[[int], dict[str, str]] | None = None) -> list[Proc]:
    """Sessions into a Slurm job on this node: the tasks of its numbered steps (`devenv exec` is an
    `srun --overlap` step), except its relays to Jupyter (a browser tab is no session, as a tunnel is not on the
    other backends), its detached runs (the runs signal counts those) and the watcher; the batch, extern and
    interactive steps are the job itself. Whose step a slurmstepd is: step_of (environ reads a task's SLURM_*
    environment, only where the rest cannot tell)."""
    if not job_id:
        return []
    tasks: dict[int, list[Proc]] = {}
    for p in procs:
        if not p.cmd.startswith("slurmstepd"):
            tasks.setdefault(p.ppid, []).append(p)
    read = environ or slurm_environ
    steps = {p.pid for p in procs if p.cmd.startswith(STEPD_TITLE)
             and step_of(p, tasks.get(p.pid, []), job_id, read)[:1].isdigit()}
    return [p for p in procs if p.ppid in steps and not p.cmd.startswith("slurmstepd")
            and not any(marker in p.cmd for marker in _NOT_SESSIONS)]


STEPD_TITLE = "slurmstepd: ["
_CGROUP_STEP = re.compile(r"/job_(\d+)/step_([^/\s]+)")
_SPECIAL_STEPS = 0xFFFFFFF0    # SLURM_STEP_ID at or above: batch, extern, interactive (slurm.h's ids)


def step_of(stepd: Proc, tasks: list[Proc], job_id: str, environ: Callable[[int], dict[str, str]]) -> str:
    """The name of the step slurmstepd `stepd` runs ("0", "batch", "extern", "interactive"; a prefix of it where
    only that is known) if it is a step of job job_id, else "". The most reliable signal first:
      1. a task's Slurm cgroup (proctrack/cgroup, v1 and v2: .../job_J/step_S/...), set by Slurm itself;
      2. its title "slurmstepd: [J.S]" when whole, or cut where the id and the "." still show: Slurm 22.05 cuts
         it to the space of the argv it was exec'd with ("slurmstepd: [368.0", "slurmstepd: [3360."), so that
         a title cut inside the id ("[20044" of job 200443, or of 20044) or right after the "." is ambiguous;
      3. then its tasks' SLURM_JOB_ID / SLURM_STEP_ID (a batch step's task has no SLURM_STEP_ID). A step none
         of whose tasks' environment shows the job is not counted as the job's."""
    for p in (*tasks, stepd):
        found = _CGROUP_STEP.search(p.cgroup)
        if found:
            return found.group(2) if found.group(1) == job_id else ""
    title = stepd.cmd[len(STEPD_TITLE):].split(" ")[0]      # what is left after the title's NUL: another word
    job, dot, step = title.split("]")[0].partition(".")
    if "]" in title or (dot and step):
        return step if job == job_id else ""                 # whole, or cut inside the step: the id is whole
    if dot and job != job_id or not job_id.startswith(job):
        return ""                                            # another job's id, or cut inside another job's id
    for task in tasks:                                       # ambiguous: the tasks' environment says
        env = environ(task.pid)
        if env.get("SLURM_JOB_ID"):
            if env["SLURM_JOB_ID"] != job_id:
                return ""
            step_id = env.get("SLURM_STEP_ID", "")
            return step_id if step_id.isdigit() and int(step_id) < _SPECIAL_STEPS else "batch"
    return ""


def slurm_environ(pid: int) -> dict[str, str]:
    """The SLURM_* variables of a process's environment (as it was exec'd); {} where it cannot be read."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    pairs = (item.decode(errors="replace").partition("=") for item in raw.split(b"\0") if item.startswith(b"SLURM_"))
    return {k: v for k, _, v in pairs}


def _sshd_session(p: Proc) -> bool:
    """A session's process: "sshd: alice@pts/0"; from OpenSSH 9.8 on, sshd-session runs it under its own title,
    "sshd-session: alice@pts/0"."""
    return p.cmd.startswith(("sshd: ", "sshd-session: ")) and "@" in p.cmd


def run_phase(has_exit: bool, pid_line: str | None, proc_stat: str | None) -> str:
    """A detached run's phase as devenv/env/runs.py's state_of says it (issue 23's layout: RUN/exit once ended,
    RUN/pid = "SUPERVISOR STARTTIME PGID EPOCH" once started): running while its supervisor lives with that start
    time (pids are reused) and is no zombie; starting before the pid file; lost when the supervisor is gone."""
    if has_exit:
        return "exited"
    if pid_line is None:
        return "starting"
    fields = pid_line.split()
    if proc_stat and len(fields) >= 2:
        rest = proc_stat.rsplit(") ", 1)[-1].split()
        if len(rest) >= 20 and rest[0] != "Z" and rest[19] == fields[1]:
            return "running"
    return "lost"


def runs_signal(phases: dict[str, str]) -> Signal:
    """Detached runs: one running (or starting) is activity."""
    live = sorted(run for run, phase in phases.items() if phase in ("running", "starting"))
    if live:
        return Signal(ACTIVE, f"{len(live)} running ({', '.join(live[:3])})")
    return Signal(IDLE, "none running")


@dataclass
class JupyterSeen:
    """What the previous sample saw of Jupyter: activity is a change of it (never a wall-clock comparison)."""

    kernels: dict[str, str] = field(default_factory=dict)     # kernel id -> its last_activity
    terminals: dict[str, str] = field(default_factory=dict)   # terminal name -> its last_activity
    first: bool = True


def jupyter_signal(kernels: list[dict[str, Any]], terminals: list[dict[str, Any]], seen: JupyterSeen) -> Signal:
    """Busy kernels, and kernels or terminals whose last_activity moved since the last sample, are activity.
    Jupyter's API-wide last_activity is left out on purpose: an open browser tab polls the API all night."""
    busy = [k for k in kernels if k.get("execution_state") in ("busy", "starting")]
    now_kernels = {str(k.get("id")): str(k.get("last_activity")) for k in kernels}
    now_terms = {str(t.get("name")): str(t.get("last_activity")) for t in terminals}
    moved = [] if seen.first else [k for k, v in now_kernels.items() if seen.kernels.get(k) != v]
    typed = [] if seen.first else [t for t, v in now_terms.items() if seen.terminals.get(t) != v]
    seen.kernels, seen.terminals, seen.first = now_kernels, now_terms, False
    if busy:
        return Signal(ACTIVE, f"{len(busy)} kernel(s) busy")
    if moved or typed:
        return Signal(ACTIVE, "kernel or terminal activity")
    return Signal(IDLE, f"{len(kernels)} kernel(s) idle, {len(terminals)} terminal(s)")


def describe(seconds: float) -> str:
    """90 m, 45 s, 2 h 5 m: how status says a duration."""
    seconds = max(0, int(round(seconds)))
    if seconds < 120:
        return f"{seconds} s"
    minutes = seconds // 60
    return f"{minutes} m" if minutes < 120 else f"{minutes // 60} h {minutes % 60} m"


def held_line(judge: Judge, signals: dict[str, Signal]) -> str:
    """One line of the watcher's log: what holds the clock now (what each holder saw), or that nothing does."""
    if not judge.held_by:
        return f"autostop: idle, stops after {describe(judge.idle_s)} idle"
    return "autostop: held by " + ", ".join(f"{name} ({signals[name].said})" for name in judge.held_by)


def state_record(config: dict[str, Any], judge: Judge, signals: dict[str, Signal], gpu_s: GpuSeconds,
                 state: str, reason: str = "") -> dict[str, Any]:
    """What the state file holds (status reads it): the watcher's state, the clock, each signal, GPU-seconds."""
    return {"schema": SCHEMA, "env": config.get("env"), "pid": os.getpid(), "state": state,
            "window_s": judge.idle_s, "interval_s": judge.interval_s, "idle_for_s": round(judge.idle_for, 1),
            "stops_in_s": round(judge.stops_in, 1), "held_by": judge.held_by,
            "signals": {name: {"state": s.state, "said": s.said} for name, s in signals.items()},
            "active_gpu_s": round(gpu_s.active, 1), "idle_gpu_s": round(gpu_s.idle, 1),
            "action": config.get("action", "stop"), "reason": reason, "job_id": config.get("job_id"),
            "updated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


# --- reading the machine (main's part) -----------------------------------------------------------------------


def cmdline_text(raw: bytes) -> str:
    """/proc/PID/cmdline as one line: its NUL-separated words joined by spaces."""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def read_procs() -> list[Proc]:
    procs = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
            with open(f"/proc/{entry}/cmdline", "rb") as fb:
                cmd = cmdline_text(fb.read())
            with open(f"/proc/{entry}/cgroup") as f:
                cgroup = f.read()
        except OSError:
            continue
        ns = fields.get("NSpid", "").split()
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd")
        except OSError:
            cwd = ""   # another user's process, or gone
        procs.append(Proc(int(entry), int(fields.get("PPid", "0").strip() or 0),
                          int(fields.get("Uid", "0").split()[0] or 0), cmd, cgroup, int(ns[-1]) if ns else 0, cwd))
    return procs


def read_gpus(config: dict[str, Any]) -> tuple[dict[int, float] | None, str]:
    command = [config.get("nvidia_smi") or "nvidia-smi", *NVIDIA_SMI_QUERY]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        return None, "nvidia-smi not found"
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"nvidia-smi failed: {exc}"
    if done.returncode != 0:
        return None, f"nvidia-smi exit {done.returncode}: {(done.stderr or done.stdout).strip()[:200]}"
    try:
        return parse_gpu_utilization(done.stdout, str(config.get("gpus", "all"))), ""
    except ValueError as exc:
        return None, str(exc)


def read_jupyter(config: dict[str, Any], seen: JupyterSeen) -> Signal:
    jupyter = config.get("jupyter")
    if not jupyter:
        return Signal(ABSENT, "no Jupyter")
    try:
        with open(os.path.expanduser(jupyter["token_file"])) as f:
            token = f.read().strip()
        base = f"http://127.0.0.1:{int(jupyter['port'])}"
        got = []
        for path in ("/api/kernels", "/api/terminals"):
            request = urllib.request.Request(f"{base}{path}?no_track_activity=1",
                                             headers={"Authorization": f"token {token}"})
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    got.append(json.loads(response.read() or b"[]"))
            except urllib.error.HTTPError as exc:
                if path == "/api/terminals" and exc.code == 404:   # terminals turned off
                    got.append([])
                else:
                    raise
        return jupyter_signal(got[0], got[1], seen)
    except (OSError, ValueError, KeyError) as exc:
        return Signal(UNKNOWN, f"Jupyter did not answer: {exc}"[:200])


def read_runs(config: dict[str, Any], root: str) -> Signal:
    """The environment's detached runs, read under root (/ on a bare host, the container's root through
    /proc/INIT/root on a Docker host); where that cannot be read (not root on the host), runs_exec asks inside
    the environment (one `docker exec`, only when no other signal already holds the clock)."""
    runs_dir = config.get("runs_dir")
    if not runs_dir:
        return Signal(ABSENT, "no runs folder")
    base = root.rstrip("/") + os.path.expanduser(runs_dir) if root != "/" else os.path.expanduser(runs_dir)
    try:
        names = os.listdir(base)
    except FileNotFoundError:
        names = []
    except OSError as exc:   # the container's root is not ours to read
        return read_runs_inside(config, exc)
    phases = {}
    for name in names:
        run = os.path.join(base, name)
        if not os.path.exists(os.path.join(run, "meta.json")):
            continue
        pid_line = _read(os.path.join(run, "pid"))
        stat = None
        if pid_line and pid_line.split():
            stat = _read(f"{root.rstrip('/')}/proc/{pid_line.split()[0]}/stat")
        phases[name] = run_phase(os.path.exists(os.path.join(run, "exit")), pid_line, stat)
    return runs_signal(phases)


# run inside the environment when its files cannot be read from the host: one line per run, "ID PHASE"
RUNS_INSIDE = r"""
cd "$1" 2>/dev/null || exit 0
for m in */meta.json; do
  [ -e "$m" ] || continue; d=${m%/meta.json}
  if [ -e "$d/exit" ]; then echo "$d exited"; continue; fi
  if [ ! -e "$d/pid" ]; then echo "$d starting"; continue; fi
  read -r sup st pg ep < "$d/pid"; line=""; [ -r "/proc/$sup/stat" ] && read -r line < "/proc/$sup/stat"
  rest=${line##*) }; set -- $rest
  if [ -n "$line" ] && [ "$1" != Z ] && [ "${20}" = "$st" ]; then echo "$d running"; else echo "$d lost"; fi
done
"""


def read_runs_inside(config: dict[str, Any], why: OSError) -> Signal:
    prefix = config.get("runs_exec")
    if not prefix:
        return Signal(UNKNOWN, f"cannot read the runs folder: {why.strerror}")
    try:
        done = subprocess.run([*prefix, "sh", "-c", RUNS_INSIDE, "devenv-runs", config["runs_dir"]],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Signal(UNKNOWN, f"cannot ask for the runs: {exc.__class__.__name__}")
    if done.returncode != 0:
        return Signal(UNKNOWN, f"cannot ask for the runs: exit {done.returncode}")
    return runs_signal(dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line))


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _alive(pid: int) -> bool:
    """Whether pid runs: a zombie (ended, not reaped yet by its parent, or by an init that reaps late) does not."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except PermissionError:
        pass
    except OSError:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return True   # no /proc: the signal's answer is all there is
    return stat[stat.rfind(b")") + 2:][:1] not in (b"Z", b"X")


def environment_gone(config: dict[str, Any], procs: list[Proc]) -> bool:
    """The environment stopped without the watcher (down, docker stop, a crash): nothing left to watch."""
    scope = config["sessions"]
    if scope["kind"] == "container":
        return container_init(procs, scope["container_id"]) is None
    pid = int(config.get("alive_pid") or 0)
    return pid > 0 and not _alive(pid)   # a bare host's or a Slurm job's Jupyter


def sample(config: dict[str, Any], seen: JupyterSeen) -> tuple[dict[str, Signal], dict[int, float] | None]:
    """One sample of every signal. The GPU is always read (GPU-seconds are counted either way) and Jupyter too
    (its activity is a change between samples); the runs are asked last."""
    procs = read_procs()
    if environment_gone(config, procs):
        raise EnvironmentGone()
    scope = config["sessions"]
    root = "/"
    if scope["kind"] == "container":
        sessions = sessions_in_container(procs, scope["container_id"])
        init = container_init(procs, scope["container_id"])
        root = f"/proc/{init}/root" if init else ""
    elif scope["kind"] == "job":
        sessions = sessions_in_job(procs, str(config.get("job_id") or ""))
    else:
        uid = os.getuid() if scope.get("uid", "self") == "self" else int(scope["uid"])
        workspace = os.path.realpath(os.path.expanduser(scope["workspace"])) if scope.get("workspace") else ""
        sessions = sessions_on_host(procs, uid, _ancestry(procs, os.getpid()), workspace)
    signals = {"sessions": Signal(ACTIVE if sessions else IDLE, f"{len(sessions)} open" if sessions else "none")}
    signals["jupyter"] = read_jupyter(config, seen)
    utilization = None
    if str(config.get("gpus", "none")) == "none":
        signals["gpu"] = Signal(ABSENT, "no GPUs")
    else:
        utilization, error = read_gpus(config)
        signals["gpu"] = gpu_signal(utilization, error, float(config.get("gpu_threshold", 5.0)))
    if any(s.holds for s in signals.values()):
        signals["runs"] = Signal(SKIPPED, "not asked: another signal holds the clock")
    elif not root:
        signals["runs"] = Signal(UNKNOWN, "the container is not running")
    else:
        signals["runs"] = read_runs(config, root)
    return signals, utilization


class EnvironmentGone(Exception):
    """What the watcher watched is no longer there."""


def container_init(procs: list[Proc], container_id: str) -> int | None:
    """The host pid of the container's init (pid 1 in its namespace)."""
    return next((p.pid for p in procs if container_id and container_id in p.cgroup and p.ns_pid == 1), None)


def _ancestry(procs: list[Proc], pid: int) -> set[int]:
    by_pid = {p.pid: p for p in procs}
    chain = set()
    while pid in by_pid and pid not in chain:
        chain.add(pid)
        pid = by_pid[pid].ppid
    return chain


def write_state(path: str, record: dict[str, Any]) -> None:
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(record, f)
    os.replace(tmp, path)


def act(config: dict[str, Any]) -> str:
    """The hook (its failure is said, and the stop goes on: an idle GPU is not kept for a failed hook), then the
    action: an argv (docker stop, scancel) or a process group ended (TERM, then KILL after 5 s)."""
    notes = []
    hook = config.get("hook_argv")
    if hook:
        try:
            cwd = os.path.expanduser(config["hook_cwd"]) if config.get("hook_cwd") else None
            done = subprocess.run(hook, capture_output=True, timeout=float(config.get("hook_timeout_s", 600)),
                                  cwd=cwd if cwd and os.path.isdir(cwd) else None)
            notes.append("hook ran" if done.returncode == 0 else f"hook failed (exit {done.returncode})")
        except (OSError, subprocess.TimeoutExpired) as exc:
            notes.append(f"hook failed ({exc.__class__.__name__})")
    for step in config.get("action_steps", []):
        if "argv" in step:
            argv = [os.path.expanduser(a) if a.startswith("~/") else a for a in step["argv"]]
            try:
                subprocess.run(argv, capture_output=True, timeout=120)
            except (OSError, subprocess.TimeoutExpired) as exc:
                notes.append(f"{argv[0]} failed ({exc.__class__.__name__})")
        elif "killpg" in step:
            _end_group(int(step["killpg"]))
        elif "end_job" in step:
            notes += _end_job(config, float(step["end_job"]))
    return "; ".join(notes)


def _end_job(config: dict[str, Any], grace_s: float) -> list[str]:
    """A Slurm job ends itself: its Jupyter (the batch step, which the launcher became) is sent TERM, so the
    batch script exits and Slurm ends the job (COMPLETED: status shows it ended, and why); where Jupyter is
    still there after grace_s, `scancel` of the job's own id. Slurm ends this watcher with the job."""
    pid, job = int(config.get("alive_pid") or 0), str(config.get("job_id") or "")
    if pid > 1:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.2)
        if not _alive(pid):
            return []
    if not job.isdigit():
        return ["no job id to cancel"]
    try:
        subprocess.run(["scancel", job], capture_output=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [f"scancel failed ({exc.__class__.__name__})"]
    return []


def _end_group(pid: int) -> None:
    if pid <= 1:
        return
    try:
        os.killpg(pid, signal.SIGTERM)
    except OSError:
        return
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.2)
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def watch(config: dict[str, Any], armed: Callable[[], bool] = lambda: True,
          clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> str:
    """Sample until the window ends ("acted"), the environment is gone ("gone") or the watcher is no longer
    armed as it was ("disarmed": its config changed or went, or its folder is gone)."""
    judge = Judge(float(config["idle_s"]), float(config["interval_s"]))
    gpu_s, seen = GpuSeconds(), JupyterSeen()
    state_file = os.path.expanduser(config["state_file"])
    samples = 0
    logs = config["sessions"]["kind"] == "job"      # its stdout is the job's autostop-JOB.log (slurm_job.LAUNCHER)
    logged: list[str] | None = None
    while True:
        if not armed():
            return "disarmed"
        now = clock()
        gap = 0.0 if judge.last is None else min(now - judge.last, 2 * judge.interval_s)
        try:
            signals, utilization = sample(config, seen)
        except EnvironmentGone:
            _write(state_file, {**state_record(config, judge, {}, gpu_s, "ended",
                                               "the environment stopped by other means"), "samples": samples})
            return "gone"
        samples += 1
        gpu_s.add(gap, list(utilization.values()) if utilization else None, float(config.get("gpu_threshold", 5)))
        idle = judge.observe(now, signals)
        if logs and judge.held_by != logged:     # the job's output: what holds it, each time that changes
            logged = list(judge.held_by)
            print(f"{time.strftime('%H:%M:%S')} {held_line(judge, signals)}", flush=True)
        if idle:
            reason = f"idle {describe(judge.idle_s)}"
            if config.get("ends_itself"):   # the action ends this watcher too (a Slurm job): said first
                _write(state_file, state_record(config, judge, signals, gpu_s, "stopped", reason))
                act(config)
                return "acted"
            _write(state_file, state_record(config, judge, signals, gpu_s, "stopping", reason))
            notes = act(config)
            _write(state_file, state_record(config, judge, signals, gpu_s, "stopped",
                                            reason + (f"; {notes}" if notes else "")))
            return "acted"
        if not _write(state_file, {**state_record(config, judge, signals, gpu_s, "watching"), "samples": samples}):
            return "disarmed"     # its folder was removed (down, --no-autostop)
        sleep(judge.interval_s)


def _write(path: str, record: dict[str, Any]) -> bool:
    try:
        write_state(path, record)
        return True
    except OSError:
        return False


def _stamp(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def _still(path: str, stamp: tuple[int, int, int]) -> Callable[[], bool]:
    return lambda: _stamp(path) == stamp


def in_job(folder: str, jupyter_pid: int, poll_s: float = 2.0) -> int:
    """In a Slurm job, started by the job's launcher beside its Jupyter (jupyter_pid, the batch step): wait for
    devenv to arm autostop (FOLDER/config.json for this job, written by `up` on the login node, on the file
    system the nodes share), watch while it stays armed as it was, and wait again when it is turned off or armed
    anew. One stat every poll_s while not armed; ends with the job (or once it ended the job)."""
    job = os.environ.get("SLURM_JOB_ID", "")
    path = os.path.join(folder, "config.json")
    seen: tuple[int, int, int] | None = None
    while _alive(jupyter_pid):
        stamp = _stamp(path)
        if stamp is not None and stamp != seen:
            seen = stamp
            try:
                with open(path) as f:
                    config = json.load(f)
            except (OSError, ValueError):
                config = None
            if isinstance(config, dict) and job and str(config.get("job_id")) == job:
                config["alive_pid"] = jupyter_pid
                if config.get("gpus") == "job":   # the job's GPUs, as nvidia-smi in the job shows them
                    config["gpus"] = "all" if os.environ.get("SLURM_JOB_GPUS") or \
                        os.environ.get("CUDA_VISIBLE_DEVICES") else "none"
                if watch(config, _still(path, stamp)) in ("acted", "gone"):
                    return 0
                continue
        time.sleep(poll_s)
    return 0


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if len(argv) >= 4 and argv[1] == "--in-job":
        return in_job(argv[2], int(argv[3]))
    with open(argv[1]) as f:
        config = json.load(f)
    watch(config)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
