"""Who else is on a GPU (L0): one framed look at a host's GPUs and their compute processes, and the pure
decisions over it -- which processes belong to a sanity run (its own pid tree) and which are someone else's.

One frame, printed by occupancy_script() on the host (POSIX shell, no python needed there):
  @gpus <exit code of nvidia-smi>
  <index, uuid, memory.used, memory.total, utilization.gpu lines>
  @apps <exit code>              then compute-apps CSV lines
  @user <pid> <user>             (one `ps`)
  @cgroup <pid> <cgroup line>    (read from /proc/<pid>/cgroup: which container)
  @chain <pid> <pid>/<nspid> <ppid>/<nspid> ...   (the process and its ancestors, host pid / innermost pid)
  @pmon <exit code>              then `nvidia-smi pmon -c 1 -s u` (asked for with pmon=True, when there are
                                 processes): each process's SM %, to tell an idle co-tenant from a working one
  @end
The chain tells a run's own processes from the rest even inside a container: nvidia-smi on the host lists host
pids, the program in a container knows its own pid in the container's namespace (NSpid's last field).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from devenv.gpu.nvsmi import CALL, parse_csv, preamble
from devenv.gpu.nvsmi import to_int as _int
from devenv.gpu.sample import (
    ProcessSample,
    apps_pids_script,
    apps_query_command,
    container_from_cgroup,
    parse_apps_csv,
    parse_pmon,
    pmon_batches_script,
)

OCC_GPU_FIELDS = ("index", "uuid", "memory.used", "memory.total", "utilization.gpu")
BEGIN, END = "@gpus", "@end"
# A GPU this busy before a run, with no process to name, is still not free (processes can be invisible to
# the account devenv logs in as, or in a MIG/vGPU setup).
UNATTRIBUTED_UTIL_PCT = 10
# A co-tenant whose SM % stayed at or under this in every pmon sample of a run is idle: it holds memory, not
# the GPU's time (pmon prints "-" for a process with no utilisation sample: counted as 0).
IDLE_SM_PCT = 5


def occupancy_script(nvidia_smi: str = "nvidia-smi", pmon: bool = False) -> str:
    """One frame (see the module doc). Ancestor chains are read with the shell's `read`, at most 64 deep.
    pmon: also each process's SM % (one `pmon -c 1`, 0.05 s on the H200: tests/fixtures/health/README.md)."""
    pmon_lines = "\n" + pmon_batches_script(CALL, "  ") if pmon else ""
    return preamble(nvidia_smi) + f"""\
g=$({CALL} --query-gpu={','.join(OCC_GPU_FIELDS)} --format=csv,noheader,nounits 2>&1)
gc=$?
echo "{BEGIN} $gc"
[ -n "$g" ] && printf '%s\\n' "$g"
out=$({apps_query_command(CALL)} 2>&1)
echo "@apps $?"
[ -n "$out" ] && printf '%s\\n' "$out"
{apps_pids_script(uuids=True)}
if [ -n "$pids" ]; then
  ps -o pid=,user:32= -p "$pids" 2>/dev/null | while read -r p u; do echo "@user $p $u"; done
  for p in $pids; do
    while read -r l; do echo "@cgroup $p $l"; done < /proc/$p/cgroup
    chain=; q=$p; n=0
    while [ -n "$q" ] && [ "$q" -gt 1 ] && [ $n -lt 64 ]; do
      ns=; pp=
      while read -r k v rest; do
        case $k in NSpid:) ns="$v $rest" ;; PPid:) pp=$v ;; esac
      done < /proc/$q/status
      inner=$q; for x in $ns; do inner=$x; done
      chain="$chain $q/$inner"; q=$pp; n=$((n+1))
    done
    echo "@chain $p$chain"
  done 2>/dev/null{pmon_lines}
fi
echo {END}"""


@dataclass(frozen=True)
class GpuLoad:
    index: int | None
    uuid: str | None
    mem_used_mib: int | None
    mem_total_mib: int | None
    util_pct: int | None


@dataclass(frozen=True)
class Occupancy:
    """One look at a host: its GPUs, their compute processes (user, container) and each process's ancestry."""

    t: float
    gpus: tuple[GpuLoad, ...] = ()
    processes: tuple[ProcessSample, ...] = ()
    chains: dict[int, tuple[tuple[int, int], ...]] = field(default_factory=dict)  # pid -> ((host pid, nspid)...)
    error: str | None = None   # nvidia-smi's words when it failed (no GPU, no driver)
    pmon: bool = False         # the processes' sm_pct come from pmon (a "-" there is None: no sample, idle)
    tail: str = ""             # what a caller's own commands printed after the frame (sample(extra=...))

    def gpu(self, uuid: str | None) -> GpuLoad | None:
        return next((g for g in self.gpus if g.uuid and g.uuid == uuid), None)

    def to_dict(self) -> dict[str, Any]:
        return {"t": self.t, "error": self.error,
                "gpus": [g.__dict__ for g in self.gpus], "processes": [p.to_dict() for p in self.processes]}


def parse_occupancy(text: str, t: float) -> Occupancy:
    """The frame printed by occupancy_script (text outside @gpus ... @end is ignored)."""
    section, code = None, 0
    gpu_lines: list[str] = []
    app_lines: list[str] = []
    users: dict[int, str] = {}
    cgroups: dict[int, list[str]] = {}
    chains: dict[int, tuple[tuple[int, int], ...]] = {}
    pmon_lines: list[str] = []
    pmon_codes: list[int | None] = []
    tail: list[str] = []
    ended = False
    error = None
    for line in text.splitlines():
        if ended:
            tail.append(line)
            continue
        head, _, rest = line.partition(" ")
        if head == BEGIN:
            found = _int(rest)
            section, code = "gpus", (found if found is not None else -1)
            if code:
                error = f"nvidia-smi exit code {code}"
        elif head == "@apps":
            section = "apps" if _int(rest) == 0 else "skip"
        elif head == "@user":
            pid, _, user = rest.partition(" ")
            if pid.isdigit() and user.strip():
                users[int(pid)] = user.strip()
        elif head == "@cgroup":
            pid, _, cg = rest.partition(" ")
            if pid.isdigit():
                cgroups.setdefault(int(pid), []).append(cg)
        elif head == "@chain":
            parts = rest.split()
            if parts and parts[0].isdigit():
                links = []
                for link in parts[1:]:
                    host, _, inner = link.partition("/")
                    if host.isdigit() and inner.isdigit():
                        links.append((int(host), int(inner)))
                chains[int(parts[0])] = tuple(links)
        elif head == "@pmon":
            section = "pmon"
            pmon_codes.append(_int(rest))
        elif line.strip() == END:
            section, ended = None, True
        elif section == "pmon":
            pmon_lines.append(line)
        elif section == "gpus":
            if code:
                error = (error or "") + (": " if error else "") + line.strip()
            else:
                gpu_lines.append(line)
        elif section == "apps":
            app_lines.append(line)
    gpus = tuple(GpuLoad(_int(r["index"]), r["uuid"], _int(r["memory.used"]), _int(r["memory.total"]),
                         _int(r["utilization.gpu"]))
                 for r in parse_csv("\n".join(gpu_lines), OCC_GPU_FIELDS) if _int(r["index"]) is not None)
    pmon_ok = bool(pmon_codes) and all(code == 0 for code in pmon_codes)
    sm = parse_pmon(pmon_lines) if pmon_ok else {}
    index_of = {g.uuid: g.index for g in gpus}
    processes = tuple(
        ProcessSample(p.pid, p.name, p.used_mib, p.gpu_uuid, users.get(p.pid),
                      container_from_cgroup(cgroups.get(p.pid, ())),
                      sm_pct=sm.get((index_of.get(p.gpu_uuid), p.pid)) if pmon_ok else None)  # type: ignore[arg-type]
        for p in parse_apps_csv("\n".join(app_lines)))
    return Occupancy(t, gpus, processes, chains, error if not gpus else None, pmon=pmon_ok, tail="\n".join(tail))


# --- whose process is it -------------------------------------------------------------------------------

@dataclass(frozen=True)
class RunIdentity:
    """How to recognise a run's own processes: its pid as the program saw it, and the container it ran in
    (None: on the host itself). A GPU process is the run's own when the program's pid is in its ancestry."""

    pid: int | None
    container: str | None = None     # full or short container id

    def owns(self, proc: ProcessSample, chain: Iterable[tuple[int, int]]) -> bool:
        if self.pid is None:
            return False
        if self.container is None:
            return proc.container is None and any(host == self.pid for host, _ in chain)
        same = proc.container is not None and (self.container.startswith(proc.container)
                                               or proc.container.startswith(self.container))
        return same and any(inner == self.pid for _, inner in chain)


@dataclass(frozen=True)
class Sharer:
    """Another process seen on a GPU."""

    gpu_index: int | None
    gpu_uuid: str | None
    pid: int | None                  # None: the GPU was busy and no process could be named
    user: str | None = None
    name: str | None = None
    used_mib: int | None = None
    container: str | None = None
    util_pct: int | None = None      # the GPU's utilisation when it was seen (before the run: its alone)
    sm_max: int | None = None        # its highest SM % in the samples that had pmon ("-" counts as 0)
    sm_samples: int = 0              # samples where pmon answered for it
    samples: int = 0                 # samples where it was seen

    @property
    def idle(self) -> bool:
        """It held memory but no GPU time: pmon answered in every sample that saw it (at least two), and its
        SM % never passed IDLE_SM_PCT. Without pmon nobody can tell: not idle."""
        return (self.pid is not None and self.samples >= 2 and self.sm_samples == self.samples
                and (self.sm_max or 0) <= IDLE_SM_PCT)

    def describe(self) -> str:
        if self.pid is None:
            return f"a process not visible from here ({self.util_pct}% util)"
        name = (self.name or "?").rsplit("/", 1)[-1]
        bits = [self.user or "?", name]
        if self.container:
            bits.append(f"container {self.container}")
        if self.used_mib is not None:
            bits.append(f"{self.used_mib / 1024:.1f} GiB")
        if self.idle:
            bits.append(f"at most {self.sm_max or 0}% SM in {self.sm_samples} samples")
        elif self.util_pct is not None:
            bits.append(f"{self.util_pct}% util")
        return f"pid {self.pid} ({', '.join(bits)})"

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def foreign(samples: Iterable[Occupancy], me: RunIdentity | None, uuids: Iterable[str] | None = None,
            first_is_before_run: bool = True) -> dict[str, list[Sharer]]:
    """GPU uuid -> the other processes seen on it across the samples (each pid once, its largest memory; the
    util of the first sample that saw it). uuids limits it to the GPUs of interest (None: every GPU).
    A GPU busy in the before-run sample with no process at all counts as shared by an unnamed process."""
    wanted = set(uuids) if uuids is not None else None
    seen: dict[str, dict[int, Sharer]] = {}
    unnamed: dict[str, Sharer] = {}
    for k, s in enumerate(samples):
        by_uuid = {g.uuid: g for g in s.gpus if g.uuid}
        for p in s.processes:
            if not p.gpu_uuid or (wanted is not None and p.gpu_uuid not in wanted):
                continue
            if me is not None and me.owns(p, s.chains.get(p.pid, ())):
                continue
            gpu = by_uuid.get(p.gpu_uuid)
            old = seen.setdefault(p.gpu_uuid, {}).get(p.pid)
            used = max(filter(None, (p.used_mib, old.used_mib if old else None)), default=p.used_mib)
            util = old.util_pct if old else (gpu.util_pct if gpu else None)
            sm_max = old.sm_max if old else None
            if s.pmon:
                sm_max = max(sm_max or 0, p.sm_pct or 0)
            seen[p.gpu_uuid][p.pid] = Sharer(gpu.index if gpu else None, p.gpu_uuid, p.pid, p.user, p.name, used,
                                             p.container, util, sm_max,
                                             (old.sm_samples if old else 0) + (1 if s.pmon else 0),
                                             (old.samples if old else 0) + 1)
        if k == 0 and first_is_before_run:
            for g in s.gpus:
                if (g.uuid and (wanted is None or g.uuid in wanted) and (g.util_pct or 0) >= UNATTRIBUTED_UTIL_PCT
                        and not any(p.gpu_uuid == g.uuid for p in s.processes)):
                    unnamed[g.uuid] = Sharer(g.index, g.uuid, None, util_pct=g.util_pct)
    out = {uuid: sorted(found.values(), key=lambda x: x.pid or 0) for uuid, found in seen.items() if found}
    for uuid, sharer in unnamed.items():
        out.setdefault(uuid, []).append(sharer)
    return out


def whose(proc: ProcessSample, login_user: str | None, owner: str) -> str | None:
    """'other user' / 'other env' / both, for a process that is not the viewer's: run by another user than the
    one devenv logs in as, or in a container that is not one of this owner's environments (devenv-<owner>-*)."""
    marks = []
    if login_user and proc.user and proc.user != login_user:
        marks.append("other user")
    if proc.container and not proc.container.startswith(f"devenv-{owner}-"):
        marks.append("other env")
    return ", ".join(marks) or None


def describe_gpu(index: int | None, sharers: list[Sharer], verb: str = "was shared with") -> str:
    """'GPU 0 was shared with pid 820 (root, python3, 1.1 GiB, 100% util)' (several joined with ' and ')."""
    where = f"GPU {index}" if index is not None else "a GPU"
    return f"{where} {verb} {' and '.join(s.describe() for s in sharers)}"
