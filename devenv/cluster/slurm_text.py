"""What Slurm's own tools print, as plain data (L0): no I/O here, so every parser is tested on recorded output.

devenv asks for machine-readable forms: `squeue -o` with '|' between fields (fields devenv controls go first;
a free-text field, the comment, goes last), `scontrol show ... --oneliner` (KEY=VALUE words), `sbatch
--parsable` (the job id, `;cluster` on federations). A field Slurm leaves empty or writes as N/A stays None.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

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
    def hopeless(self) -> str | None:
        """Why a pending job will never start, in words; None when waiting may help."""
        if self.phase != "pending" or not self.reason:
            return None
        return HOPELESS_REASONS.get(self.reason)

    def pending_text(self) -> str:
        """'Priority (jobs of higher priority are ahead of it), estimated start 2026-12-01T12:00:00'."""
        reason = self.reason or "None"
        words = PENDING_WORDS.get(reason)
        text = f"{reason} ({words})" if words else reason
        return text + (f", estimated start {self.start}" if self.start else ", no estimated start yet")

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
    out = []
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


@dataclass
class PartitionInfo:
    name: str
    state: str
    default: bool
    max_time: str
    nodes: list[str] = field(default_factory=list)      # node names (from the node records)
    node_states: dict[str, int] = field(default_factory=dict)   # idle -> 1, mixed -> 1 ...
    cpus_total: int = 0
    cpus_free: int = 0
    gpus_total: int = 0
    gpus_free: int = 0
    gpu_types: set[str] = field(default_factory=set)

    def to_dict(self) -> dict:
        return {"name": self.name, "state": self.state, "default": self.default, "max_time": self.max_time,
                "nodes": self.nodes, "node_states": self.node_states, "cpus_total": self.cpus_total,
                "cpus_free": self.cpus_free, "gpus_total": self.gpus_total, "gpus_free": self.gpus_free,
                "gpu_types": sorted(self.gpu_types)}


_UNUSABLE = ("DOWN", "DRAIN", "FAIL", "NOT_RESPONDING", "POWERED_DOWN", "FUTURE", "INVAL")


def summarize_partitions(partitions: list[dict[str, str]], nodes: list[dict[str, str]]) -> list[PartitionInfo]:
    """Partitions with CPUs and GPUs free/total over their usable nodes, from `scontrol show partition|node -o`."""
    by_partition: dict[str, list[dict[str, str]]] = {}
    for node in nodes:
        for name in node.get("Partitions", "").split(","):
            if name:
                by_partition.setdefault(name, []).append(node)
    out = []
    for record in partitions:
        name = record.get("PartitionName", "?")
        info = PartitionInfo(name=name, state=record.get("State", "?"), default=record.get("Default") == "YES",
                             max_time=record.get("MaxTime", "?"))
        for node in by_partition.get(name, []):
            info.nodes.append(node.get("NodeName", "?"))
            state = node.get("State", "?")
            word = state.split("+")[0].lower()
            info.node_states[word] = info.node_states.get(word, 0) + 1
            usable = not any(flag in state for flag in _UNUSABLE)
            cpus = _int(node.get("CPUTot"))
            info.cpus_total += cpus
            gpus = sum(g.count for g in parse_gres(node.get("Gres")) if g.name == "gpu")
            info.gpus_total += gpus
            info.gpu_types.update(g.type for g in parse_gres(node.get("Gres")) if g.name == "gpu" and g.type)
            if usable:
                info.cpus_free += max(0, cpus - _int(node.get("CPUAlloc")))
                info.gpus_free += max(0, gpus - tres_gpus(node.get("AllocTRES")))
        out.append(info)
    return out


def _int(text: str | None) -> int:
    return int(text) if text and text.isdigit() else 0
