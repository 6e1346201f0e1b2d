"""What Slurm's own tools print, as plain data (L0): no I/O here, so every parser is tested on recorded output.

devenv asks for machine-readable forms: `squeue -o` with '|' between fields (fields devenv controls go first;
a free-text field, the comment, goes last), `scontrol show ... --oneliner` (KEY=VALUE words), `sbatch
--parsable` (the job id, `;cluster` on federations). A field Slurm leaves empty or writes as N/A stays None.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from devenv.env.durations import compact_duration

if TYPE_CHECKING:  # imported where it is used: most commands never read a Slurm time
    from datetime import datetime

# squeue's -o fields, in the order JOB_FORMAT asks for them.
JOB_FIELDS = ("job_id", "name", "state", "reason", "nodes", "time_left", "start", "time_limit", "node_count",
              "partition", "comment")
JOB_FORMAT = "%i|%j|%T|%r|%N|%L|%S|%l|%D|%P|%k"

PENDING_STATES = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD",
                  "SUSPENDED", "STOPPED", "SIGNALING", "RESIZING"}
RUNNING_STATES = {"RUNNING"}
ENDING_STATES = {"COMPLETING", "STAGE_OUT"}
# Every other state is an end: COMPLETED, CANCELLED, FAILED, TIMEOUT, NODE_FAIL, PREEMPTED, BOOT_FAIL,
# DEADLINE, OUT_OF_MEMORY, SPECIAL_EXIT, REVOKED.

# Why a job ended, in words (states from squeue/scontrol; `man squeue`, JOB STATE CODES).
END_WORDS = {
    "COMPLETED": "its job script exited (Jupyter stopped on its own)",
    "CANCELLED": "it was cancelled (scancel)",
    "FAILED": "its job script failed",
    "TIMEOUT": "it reached its time limit",
    "NODE_FAIL": "a node of the allocation failed",
    "PREEMPTED": "it was preempted by a higher-priority job",
    "BOOT_FAIL": "a node failed to boot",
    "DEADLINE": "it reached its deadline",
    "OUT_OF_MEMORY": "it ran out of memory",
    "SPECIAL_EXIT": "it ended with a special exit state",
    "REVOKED": "a sibling cluster took it (federation)",
}

# While a job is COMPLETING, squeue's state is not yet its outcome, but its reason already says what ended it
# (`man squeue`, JOB REASON CODES: the reasons a running job ends with).
ENDING_REASON_OUTCOMES = {
    "TimeLimit": "TIMEOUT",
    "NodeDown": "NODE_FAIL",
    "NonZeroExitCode": "FAILED",
    "JobLaunchFailure": "FAILED",
    "OutOfMemory": "OUT_OF_MEMORY",
    "DeadLine": "DEADLINE",
}

# Pending reasons that will never clear by waiting (the job can never run as asked): fail fast, and cancel.
# From `man squeue`, JOB REASON CODES.
HOPELESS_REASONS = {
    "PartitionConfig": "the partition cannot run a job of this shape",
    "PartitionNodeLimit": "more nodes than the partition allows",
    "PartitionTimeLimit": "a longer time limit than the partition allows",
    "PartitionDown": "the partition is down",
    "PartitionInactive": "the partition is inactive",
    "BadConstraints": "no node has the requested features or resources",
    "InvalidAccount": "the account is not valid",
    "InvalidQOS": "the QOS is not valid",
    "QOSJobLimit": "the QOS's job limit",
    "AccountNotAllowed": "the account may not use this partition",
    "QOSNotAllowed": "the QOS may not be used in this partition",
    "DependencyNeverSatisfied": "a dependency that can never be satisfied",
    "FrontEndDown": "the front end is down",
    "NodeDown": "a required node is down",
}

# A few pending reasons explained (the rest are shown as Slurm names them).
PENDING_WORDS = {
    "None": "the scheduler has not looked at it yet",
    "Priority": "jobs of higher priority are ahead of it",
    "Resources": "waiting for resources to become free",
    "QOSMaxGRESPerUser": "your QOS's GPU limit is reached (other jobs of yours hold them)",
    "QOSMaxJobsPerUserLimit": "your QOS's limit of running jobs is reached",
    "AssocGrpGRES": "your association's GPU limit is reached",
    "ReqNodeNotAvail": "a required node is not available (down, drained or reserved)",
    "BeginTime": "its start time has not come yet",
    "Dependency": "waiting for a job it depends on",
    "JobHeldUser": "held by you (scontrol release)",
    "JobHeldAdmin": "held by an administrator",
    "Reservation": "waiting for its reservation",
}


@dataclass(frozen=True)
class Job:
    """One line of squeue (or one `scontrol show job`), with Slurm's words kept as they are."""

    job_id: str
    name: str
    state: str                  # RUNNING, PENDING, TIMEOUT, ...
    reason: str | None          # pending reason, or why it ended (None when Slurm says None)
    nodes: str | None           # the node list expression ("node[1-2]"), None while pending
    time_left: str | None       # "29:41", "UNLIMITED", None when not applicable
    start: str | None           # actual or estimated start ("2026-12-01T11:12:27"), None when unknown
    time_limit: str | None
    node_count: int
    partition: str | None
    comment: str | None

    @property
    def phase(self) -> str:
        """pending | running | ending | ended."""
        if self.state in PENDING_STATES:
            return "pending"
        if self.state in RUNNING_STATES:
            return "running"
        if self.state in ENDING_STATES:
            return "ending"
        return "ended"

    @property
    def reason_code(self) -> str | None:
        """The reason's code without Slurm's detail: 'ReqNodeNotAvail, UnavailableNodes:node[1-2]' ->
        'ReqNodeNotAvail'; None while the scheduler has given none."""
        return self.reason.split(",")[0].strip() if self.reason else None

    @property
    def hopeless(self) -> str | None:
        """Why a pending job will never start, in words; None when waiting may help."""
        if self.phase != "pending" or not self.reason_code:
            return None
        return HOPELESS_REASONS.get(self.reason_code)

    def reason_text(self) -> str:
        """'Resources (waiting for resources to become free)', 'ReqNodeNotAvail (...): UnavailableNodes:node1';
        a job the scheduler has not looked at yet says so in words (never Slurm's bare "None")."""
        code = self.reason_code
        if code is None:
            return "not scheduled yet (Slurm's scheduler has not looked at it)"
        words = PENDING_WORDS.get(code)
        rest = (self.reason or "")[len(code):].strip(", ")
        return code + (f" ({words})" if words else "") + (f": {rest}" if rest else "")

    def pending_text(self) -> str:
        """'Priority (jobs of higher priority are ahead of it), estimated start 2026-12-01T12:00:00'."""
        return self.reason_text() + (f", estimated start {self.start}" if self.start else
                                     ", no estimated start yet")

    @property
    def outcome(self) -> str:
        """How the job ended (TIMEOUT, NODE_FAIL, ...): its state, or while it is still COMPLETING the state its
        reason implies (a time limit is seen as COMPLETING/TimeLimit for a few seconds before TIMEOUT)."""
        if self.phase == "ending" and self.reason in ENDING_REASON_OUTCOMES:
            return ENDING_REASON_OUTCOMES[self.reason]
        return self.state

    def end_text(self) -> str:
        """'TIMEOUT: it reached its time limit (TimeLimit)'; a job still ending says so."""
        outcome = self.outcome
        if outcome in END_WORDS:
            words = END_WORDS[outcome]
        elif self.phase == "ending":
            words = "it is ending (Slurm is stopping its processes)"
        else:
            words = "it ended"
        reason = self.reason if self.reason and self.reason != "None" and outcome not in ("CANCELLED",
                                                                                          "COMPLETED") else None
        if outcome != self.state:
            reason = f"Slurm still says {self.state}, reason {reason}"
        return f"{outcome}: {words}" + (f" ({reason})" if reason else "")


@dataclass(frozen=True)
class QueueSpot:
    """Where a pending job stands in Slurm's queue: how long it has waited (the cluster's clock against its
    submit time) and its place among its partition's pending jobs, in the order the scheduler takes them
    (priority, then job id). None where Slurm did not say (another partition list, a hidden queue)."""

    waited_s: int | None = None
    position: int | None = None
    pending: int | None = None          # pending jobs in the partition, this one included

    def to_dict(self) -> dict[str, Any]:
        return {"waited_s": self.waited_s, "position": self.position, "pending": self.pending}


# One round trip for QueueSpot: the cluster's clock, then every pending job Slurm shows in scheduling order.
QUEUE_COMMAND = ("date +%Y-%m-%dT%H:%M:%S; squeue --noheader --states=PENDING --sort=-p,i "
                 "--format='%i|%P|%V'")


def queue_spot(job_id: str, text: str) -> QueueSpot:
    """QUEUE_COMMAND's output -> where job_id stands (an empty QueueSpot when it is not listed)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    now = _when(lines[0]) if lines else None
    rows = [ln.split("|") for ln in lines[1:] if ln.count("|") == 2]
    mine = next((r for r in rows if r[0].strip() == job_id), None)
    if mine is None:
        return QueueSpot()
    submitted = _when(mine[2])
    waited = int((now - submitted).total_seconds()) if now and submitted else None
    partition = mine[1].strip()
    same = [r[0].strip() for r in rows if r[1].strip() == partition]
    single = "," not in partition
    return QueueSpot(max(0, waited) if waited is not None else None,
                     same.index(job_id) + 1 if single else None, len(same) if single else None)


def _when(text: str) -> datetime | None:
    from datetime import datetime

    try:
        return datetime.fromisoformat(text.strip())
    except ValueError:
        return None


def duration(seconds: float) -> str:
    """42 -> '42 s', 310 -> '5m10s', 3700 -> '1h01m': a wait, in a sentence."""
    return compact_duration(seconds, seconds_unit=" s")


def wait_text(job: Job, spot: QueueSpot, waited_s: float | None, limit_s: float | None) -> str:
    """'pending 25 s (at most 5m00s: slurm.queue_timeout): Resources (waiting for resources to become free);
    position 2 of 3 in partition debug; no estimated start yet'. waited_s: this caller's own count, used where
    Slurm's submit time was not read."""
    waited = spot.waited_s if spot.waited_s is not None else waited_s
    text = "pending" + (f" {duration(waited)}" if waited is not None else "")
    if limit_s is not None:
        text += f" (at most {duration(limit_s)}: slurm.queue_timeout)"
    text += f": {job.reason_text()}"
    if spot.position is not None:
        text += f"; position {spot.position} of {spot.pending} in partition {job.partition or '?'}"
    return text + (f"; estimated start {job.start}" if job.start else "; no estimated start yet")


def _na(value: str) -> str | None:
    value = value.strip()
    return None if value in ("", "N/A", "(null)", "None", "n/a", "NONE") else value


def parse_jobs(text: str) -> list[Job]:
    """squeue -h -o JOB_FORMAT output -> jobs (lines that do not fit are skipped: squeue's warnings)."""
    jobs = []
    for line in text.splitlines():
        parts = line.split("|", len(JOB_FIELDS) - 1)
        if len(parts) != len(JOB_FIELDS) or not re.fullmatch(r"\d+(_\d+)?", parts[0].strip()):
            continue
        values = dict(zip(JOB_FIELDS, parts))
        count = values["node_count"].strip()
        jobs.append(Job(
            job_id=values["job_id"].strip(), name=values["name"].strip(), state=values["state"].strip(),
            reason=_na(values["reason"]), nodes=_na(values["nodes"]), time_left=_na(values["time_left"]),
            start=_na(values["start"]), time_limit=_na(values["time_limit"]),
            node_count=int(count) if count.isdigit() else 0, partition=_na(values["partition"]),
            comment=_na(values["comment"]),
        ))
    return jobs


def parse_records(text: str) -> list[dict[str, str]]:
    """`scontrol show node|partition|job --oneliner`: one record a line of KEY=VALUE words.

    Values may contain spaces (OS=Linux 6.1.0 #1 SMP ...): a word without '=' belongs to the previous value.
    """
    records = []
    for line in text.splitlines():
        if "=" not in line:
            continue
        record: dict[str, str] = {}
        last = None
        for word in line.split():
            key, sep, value = word.partition("=")
            if sep and re.fullmatch(r"[A-Za-z][A-Za-z0-9_:/]*", key):
                record[key] = value
                last = key
            elif last is not None:
                record[last] += " " + word
        records.append(record)
    return records


def job_from_record(record: dict[str, str]) -> Job:
    """A `scontrol show job --oneliner` record as a Job (for a job squeue no longer lists by name)."""
    count = record.get("NumNodes", "0").split("-")[0]
    return Job(
        job_id=record.get("JobId", "?"), name=record.get("JobName", ""), state=record.get("JobState", "UNKNOWN"),
        reason=_na(record.get("Reason", "")), nodes=_na(record.get("NodeList", "")), time_left=None,
        start=_na(record.get("StartTime", "")), time_limit=_na(record.get("TimeLimit", "")),
        node_count=int(count) if count.isdigit() else 0, partition=_na(record.get("Partition", "")),
        comment=_na(record.get("Comment", "")),
    )


def command_failure(text: str, exit_code: int) -> tuple[str, str]:
    """(what a failed Slurm command said, what to do). Slurm prints its cause before its summary: without
    munged the last line is only "Protocol authentication error", the line before says Munge."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    munge = next((ln for ln in lines if "munge" in ln.lower() and "failed" in ln.lower()), None)
    if munge:
        return (re.sub(r"^\w+: error: ", "", munge)[:200],
                "Slurm's commands on the login node cannot authenticate: munged is not running there (or its key "
                "is not the cluster's); start munged, or ask the cluster's admins")
    said = " ".join(lines[-2:])[:300] or f"exit code {exit_code}"
    if "unable to contact slurm controller" in said.lower():
        return said, ("slurmctld is down or unreachable from the login node (`sinfo` there says the same); try "
                      "again later, or ask the cluster's admins")
    return said, "is Slurm reachable from the login node? try `sinfo` there by hand"


def parse_sbatch(text: str) -> str:
    """`sbatch --parsable` prints 'JOBID' or 'JOBID;CLUSTER'; anything else is not a submitted job."""
    for line in text.splitlines():
        match = re.fullmatch(r"\s*(\d+)(;\S+)?\s*", line)
        if match:
            return match.group(1)
    raise ValueError(f"sbatch printed no job id: {text.strip()[:200]!r}")


def parse_version(text: str) -> str | None:
    """'slurm 23.02.7' / 'slurm-wlm 22.05.8' -> '23.02.7'."""
    match = re.search(r"\bslurm(?:-wlm)?\s+(\d+\.\d+(?:\.\d+)?\S*)", text)
    return match.group(1) if match else None


# --- GRES and partitions ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Gres:
    name: str                   # gpu
    type: str | None            # a100, h100, None
    count: int


def parse_gres(text: str | None) -> list[Gres]:
    """Slurm's GRES strings ('gpu:h100:8(S:0-1),shard:8', 'gpu:2', '(null)') -> entries; unknown counts are 0."""
    out: list[Gres] = []
    if not text or _na(text) is None:
        return out
    for item in re.split(r",(?![^()]*\))", text):
        item = re.sub(r"\(.*?\)", "", item).strip()
        if not item:
            continue
        parts = item.split(":")
        name, rest = parts[0], parts[1:]
        count = 1
        if rest and rest[-1].isdigit():
            count = int(rest.pop())
        elif rest and re.fullmatch(r"\d+[KMG]", rest[-1]):   # a size ('gpu:a100:1K'): not counted here
            rest.pop()
            count = 0
        gtype = rest[0] if rest else None
        out.append(Gres(name, gtype, count))
    return out


def tres_gpus(tres: str | None) -> int:
    """GPUs in a TRES string ('cpu=8,mem=64G,gres/gpu=4,gres/gpu:a100=4') -> 4 (the untyped total)."""
    if not tres:
        return 0
    total = typed = 0
    for part in tres.split(","):
        key, _, value = part.partition("=")
        if key == "gres/gpu" and value.isdigit():
            total = int(value)
        elif key.startswith("gres/gpu:") and value.isdigit():
            typed += int(value)
    return total or typed


# --- nodes ----------------------------------------------------------------------------------------------
# A node's state as `scontrol show node` prints it: a base state and flags joined by '+' ("IDLE+DRAIN",
# "MIXED+DRAIN", "IDLE+NOT_RESPONDING", "DOWN+DRAIN+NOT_RESPONDING"); sinfo and older scontrols mark some flags
# by a suffix on the base instead ("IDLE*", "IDLE~"). `man sinfo`, NODE STATE CODES; the flag names are Slurm's.
NODE_SUFFIX_FLAGS = {"*": "NOT_RESPONDING", "~": "POWERED_DOWN", "#": "POWERING_UP", "%": "POWERING_DOWN",
                     "!": "POWER_DOWN", "$": "MAINTENANCE", "@": "REBOOT_REQUESTED", "^": "REBOOT_ISSUED",
                     "-": "PLANNED"}
# Bases and flags under which a node takes no new job until an administrator (or Slurm) clears them.
BLOCKING_BASES = {"DOWN": "down", "FUTURE": "not in service yet (future)", "UNKNOWN": "state unknown",
                  "ERROR": "in error"}
BLOCKING_FLAGS = {"DRAIN": "drained", "FAIL": "failed", "NOT_RESPONDING": "not responding",
                  "MAINTENANCE": "in a maintenance reservation", "MAINT": "in a maintenance reservation",
                  "RESERVED": "reserved (a reservation holds it)", "POWERING_DOWN": "powering down",
                  "POWER_DOWN": "powering down", "INVALID_REG": "registered with a bad configuration",
                  "REBOOT_ISSUED": "rebooting"}
# Flags under which Slurm still starts a job there, once the node has booted (power saving, cloud nodes).
BOOTING_FLAGS = {"POWERED_DOWN": "powered down (Slurm boots it for a job)", "POWERING_UP": "powering up"}
_BUSY_BASES = ("ALLOCATED", "MIXED", "COMPLETING")


@dataclass(frozen=True)
class Node:
    """One compute node as `scontrol show node --oneliner` describes it."""

    name: str
    base: str                       # IDLE, ALLOCATED, MIXED, DOWN, ...
    flags: frozenset[str]           # DRAIN, NOT_RESPONDING, POWERED_DOWN, ...
    reason: str | None              # why an admin (or Slurm) set it so: "kernel update [root@2026-12-03T15:00:37]"
    partitions: tuple[str, ...] = ()
    record: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def usable(self) -> bool:
        """Can Slurm give this node a new job (now, or after booting it)?"""
        return self.base not in BLOCKING_BASES and not self.flags & BLOCKING_FLAGS.keys()

    @property
    def booting(self) -> bool:
        return self.usable and bool(self.flags & BOOTING_FLAGS.keys())

    @property
    def free(self) -> bool:
        """Usable and not fully taken: a job can start on it without waiting for another one to end."""
        return self.usable and not self.booting and self.base in ("IDLE", "MIXED")

    @property
    def word(self) -> str:
        """The one word a summary counts it by, as sinfo's long form says it: drained, draining, failing, down..."""
        if self.base == "DOWN":
            return "down"
        if "DRAIN" in self.flags:
            return "draining" if self.base in _BUSY_BASES else "drained"
        if "FAIL" in self.flags:
            return "failing" if self.base in _BUSY_BASES else "failed"
        if "NOT_RESPONDING" in self.flags:
            return "not responding"
        for flag in ("MAINTENANCE", "MAINT", "RESERVED", "POWERED_DOWN", "POWERING_UP", "POWERING_DOWN"):
            if flag in self.flags:
                return {"MAINTENANCE": "maint", "MAINT": "maint"}.get(flag, flag.lower().replace("_", " "))
        return self.base.lower()

    def describe(self) -> str:
        """'draining (mixed; kernel update [root@...])', 'idle', 'down, not responding (fan failure ...)'."""
        words = [self.word]
        if self.word in ("draining", "failing"):
            words[0] += f" ({self.base.lower()})"
        shown = {"DRAIN", "FAIL"} if self.word in ("drained", "draining", "failed", "failing") else set()
        if self.word == "not responding":
            shown.add("NOT_RESPONDING")
        for flag in sorted(self.flags - shown):
            said = BLOCKING_FLAGS.get(flag) or BOOTING_FLAGS.get(flag)
            if said and said != self.word:
                words.append(said)
        return ", ".join(words) + (f": {self.reason}" if self.reason else "")


def parse_node_state(state: str) -> tuple[str, frozenset[str]]:
    """'IDLE+DRAIN' -> ('IDLE', {'DRAIN'}); 'DOWN*+DRAIN' -> ('DOWN', {'NOT_RESPONDING', 'DRAIN'})."""
    words = [w for w in state.strip().upper().split("+") if w]
    flags: set[str] = set()
    parts = []
    for word in words or ["UNKNOWN"]:
        while word and word[-1] in NODE_SUFFIX_FLAGS:
            flags.add(NODE_SUFFIX_FLAGS[word[-1]])
            word = word[:-1]
        parts.append(word)
    base, rest = parts[0], parts[1:]
    flags.update(rest)
    if base in ("DRAINED", "DRAINING", "DRAIN"):   # sinfo's words for a drain (idle or busy underneath)
        base, flags = ("MIXED" if base == "DRAINING" else "IDLE"), flags | {"DRAIN"}
    elif base in ("FAIL", "FAILING"):
        base, flags = ("MIXED" if base == "FAILING" else "IDLE"), flags | {"FAIL"}
    return base, frozenset(flags)


def node_from_record(record: dict[str, str]) -> Node:
    base, flags = parse_node_state(record.get("State", "UNKNOWN"))
    return Node(name=record.get("NodeName", "?"), base=base, flags=flags, reason=_na(record.get("Reason", "")),
                partitions=tuple(p for p in record.get("Partitions", "").split(",") if p), record=record)


@dataclass
class PartitionInfo:
    name: str
    state: str
    default: bool
    max_time: str
    nodes: list[str] = field(default_factory=list)      # node names (from the node records)
    node_states: dict[str, int] = field(default_factory=dict)   # idle -> 1, drained -> 1 ...
    cpus_total: int = 0
    cpus_free: int = 0
    gpus_total: int = 0
    gpus_free: int = 0
    gpu_types: set[str] = field(default_factory=set)
    node_info: list[Node] = field(default_factory=list)

    @property
    def usable_nodes(self) -> list[Node]:
        return [n for n in self.node_info if n.usable]

    @property
    def free_nodes(self) -> list[Node]:
        return [n for n in self.node_info if n.free]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "state": self.state, "default": self.default, "max_time": self.max_time,
                "nodes": self.nodes, "node_states": self.node_states, "cpus_total": self.cpus_total,
                "cpus_free": self.cpus_free, "gpus_total": self.gpus_total, "gpus_free": self.gpus_free,
                "gpu_types": sorted(self.gpu_types),
                "node_details": [{"name": n.name, "state": n.word, "slurm_state": n.record.get("State", ""),
                                  "usable": n.usable, "reason": n.reason} for n in self.node_info]}


def summarize_partitions(partitions: list[dict[str, str]], nodes: list[dict[str, str]]) -> list[PartitionInfo]:
    """Partitions with CPUs and GPUs free/total over their usable nodes, from `scontrol show partition|node -o`."""
    by_partition: dict[str, list[Node]] = {}
    for record in nodes:
        node = node_from_record(record)
        for name in node.partitions:
            by_partition.setdefault(name, []).append(node)
    out = []
    for record in partitions:
        name = record.get("PartitionName", "?")
        info = PartitionInfo(name=name, state=record.get("State", "?"), default=record.get("Default") == "YES",
                             max_time=record.get("MaxTime", "?"))
        for node in by_partition.get(name, []):
            info.nodes.append(node.name)
            info.node_info.append(node)
            info.node_states[node.word] = info.node_states.get(node.word, 0) + 1
            cpus = _int(node.record.get("CPUTot"))
            info.cpus_total += cpus
            gres = [g for g in parse_gres(node.record.get("Gres")) if g.name == "gpu"]
            gpus = sum(g.count for g in gres)
            info.gpus_total += gpus
            info.gpu_types.update(g.type for g in gres if g.type)
            if node.usable:
                info.cpus_free += max(0, cpus - _int(node.record.get("CPUAlloc")))
                info.gpus_free += max(0, gpus - tres_gpus(node.record.get("AllocTRES")))
        out.append(info)
    return out


def _int(text: str | None) -> int:
    return int(text) if text and text.isdigit() else 0
