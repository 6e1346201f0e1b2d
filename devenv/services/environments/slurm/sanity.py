"""`devenv sanity CLUSTER --nodes N` (L2): the multi-node checks in one Slurm job, judged by sanity/multinode.py.

One job of N nodes: `srun` starts one torchrun per node (c10d rendezvous on the first node's address), first
across all N nodes (all-reduce correctness, bus bandwidth, DDP step), then on the first node alone (the DDP
baseline). The script and its results live in ~/.devenv/sanity/<run> on the cluster's shared file system.
The wait is bounded twice (queue, run); whatever ends the wait, a job still alive is cancelled.
"""

from __future__ import annotations

import json
import secrets
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from devenv.cluster.errors import JobEnded, JobRejected, QueueTimeout
from devenv.cluster.slurm_job import JOB_PREFIX, JobRequest, SlurmSettings, check_time
from devenv.config.profiles import HostProfile
from devenv.errors import DevenvError
from devenv.sanity.multinode import MultiNodeVerdict, judge

if TYPE_CHECKING:
    from devenv.cluster.slurm_text import Job
    from devenv.remote.base import Connection
    from devenv.schedulers.slurm import Slurm

SCRIPT = Path(__file__).resolve().parents[3] / "sanity" / "scripts" / "multinode.py"
# How a sanity job's end reads: its script ran to its end (a result to judge; FAILED: a check failed), or
# Slurm is still finishing it (COMPLETING, no reason yet); anything else ended it early.
VERDICT_OUTCOMES = ("COMPLETED", "FAILED", "COMPLETING")
RUN_AGAIN = "`devenv sanity --nodes N` starts a new one"
EARLY_END_HINTS = {
    "TIMEOUT": "the checks ran past the job's time limit; read its log (a rendezvous that hangs usually means the "
               "nodes cannot reach the first node's address), then " + RUN_AGAIN,
    "NODE_FAIL": "a node of the allocation failed (`sinfo -R` says why); " + RUN_AGAIN + " on healthy nodes",
    "CANCELLED": "it was cancelled from outside devenv (scancel, or an administrator); " + RUN_AGAIN,
    "PREEMPTED": "a higher-priority job took the nodes; " + RUN_AGAIN,
    "OUT_OF_MEMORY": "a rank ran out of memory; ask for more (slurm.mem_per_gpu / extra sbatch options), then "
                     + RUN_AGAIN,
}
RUN_TIME = "00:15:00"           # the job's own limit: both phases on a small CPU cluster take about a minute


def job_script(python: str, script: str, run_dir: str, nodes: int, procs_per_node: int, gpus: int) -> str:
    """The batch script: two srun + torchrun phases; each phase's exit status goes to the log."""
    q = shlex.quote
    gres = f" --gres=gpu:{int(gpus)}" if gpus else ""
    run = (f"{q(python)} -m torch.distributed.run --nproc-per-node={int(procs_per_node)} --rdzv-backend=c10d "
           f"--max-restarts=0")
    return f"""#!/bin/bash
# devenv multi-node sanity (written by devenv): torchrun on every node, c10d rendezvous on the first one.
set -u
cd {q(run_dir)}
nodes=( $(scontrol show hostnames "$SLURM_JOB_NODELIST") )
head=${{nodes[0]}}
addr=$(scontrol --oneliner show node "$head" | tr ' ' '\\n' | sed -n 's/^NodeAddr=//p')
port=$((29500 + SLURM_JOB_ID % 400 * 2))
echo "devenv-multinode: nodes ${{nodes[*]}}, rendezvous $addr:$port"
srun --nodes={int(nodes)} --ntasks-per-node=1 --kill-on-bad-exit=1{gres} {run} --nnodes={int(nodes)} \\
  --rdzv-id="$SLURM_JOB_ID-multi" --rdzv-endpoint="$addr:$port" {q(script)} {q(run_dir + '/multi.json')} multi
echo "devenv-multinode: phase multi exit $?"
srun --nodes=1 --ntasks=1 --nodelist="$head"{gres} {run} --nnodes=1 \\
  --rdzv-id="$SLURM_JOB_ID-single" --rdzv-endpoint="$addr:$((port + 1))" \\
  {q(script)} {q(run_dir + '/single.json')} single
echo "devenv-multinode: phase single exit $?"
"""


@dataclass
class MultiNodeResult:
    host: str
    job_id: str
    nodes: list[str]
    verdict: MultiNodeVerdict
    multi: dict[str, Any] | None
    single: dict[str, Any] | None
    log_path: str
    log_tail: list[str]
    elapsed_s: float

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "job_id": self.job_id, "nodes": self.nodes, "verdict": self.verdict.to_dict(),
                "multi": self.multi, "single": self.single, "log": self.log_path, "elapsed_s": self.elapsed_s}


def run_multinode(host: HostProfile, conn: Connection, slurm: Slurm, nodes: int, *, python: str | None = None,
                  time_limit: str = RUN_TIME, on_step: Callable[[str], None] | None = None,
                  clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                  poll_s: float = 2.0) -> MultiNodeResult:
    """Submit the multi-node checks as one job of `nodes` nodes, wait (bounded), judge what it wrote."""
    say = on_step or (lambda text: None)
    started = clock()
    if nodes < 1:
        raise DevenvError(f"--nodes {nodes}: at least 1", "e.g. --nodes 2")
    settings: SlurmSettings = replace(host.slurm or SlurmSettings(), nodes=nodes, time=check_time(time_limit))
    python = python or host.python
    home = conn.run('printf %s "$HOME"', check=True, timeout=30).stdout.strip()
    run_dir = f"{home}/.devenv/sanity/multinode-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
    conn.run(f"mkdir -p -m 0700 {shlex.quote(run_dir)}", check=True, timeout=30)
    conn.put(SCRIPT.read_bytes(), f"{run_dir}/multinode.py", 0o600)
    procs = settings.gpus_per_node or 1
    script = job_script(python, f"{run_dir}/multinode.py", run_dir, nodes, procs, settings.gpus_per_node)
    request = JobRequest(settings, f"{JOB_PREFIX}sanity", "sanity", f"{run_dir}/job.log", run_dir)
    say(f"Submitting the multi-node sanity job ({nodes} node(s), {procs} rank(s) per node, "
        f"{'NCCL' if settings.gpus_per_node else 'gloo on CPUs'})")
    try:
        job_id = slurm.submit(request, script)
    except JobRejected as e:
        raise _rejected_nodes(e, slurm, settings, host.name) from None
    try:
        job = _wait(slurm, job_id, settings.queue_timeout, _seconds(time_limit) + 60, say, clock, sleep, poll_s,
                    host.name)
    finally:   # an interrupt, a timeout, a lost connection: no job is left behind
        current = slurm.job(job_id)
        if current is not None and current.phase in ("pending", "running"):
            slurm.cancel(job_id)
    multi, single = _read_json(conn, f"{run_dir}/multi.json"), _read_json(conn, f"{run_dir}/single.json")
    tail = conn.run(f"tail -n 40 {shlex.quote(run_dir + '/job.log')}", timeout=30).stdout.splitlines()
    error = None
    if multi is None:
        said = [ln for ln in tail if "devenv-multinode error" in ln or "Error" in ln]
        ran = "its script exited" if job.outcome == "COMPLETED" else "its script failed"   # (a verdict outcome)
        error = (f"job {job_id} ended ({job.outcome}: {ran}) without a multi-node result"
                 + (f": {said[-1].strip()}" if said else ""))
    verdict = judge(multi, single, nodes, error)
    return MultiNodeResult(host.name, job_id, slurm.hostnames(job.nodes) if job.nodes else [], verdict, multi,
                           single, f"{run_dir}/job.log", tail, clock() - started)


def _rejected_nodes(error: JobRejected, slurm: Slurm, settings: SlurmSettings, host_name: str) -> JobRejected:
    """A node count Slurm refuses came from --nodes, not from the host profile: say so, with the count the
    partition has (asked of Slurm only on this way out)."""
    if "node count" not in error.message.lower():
        return error
    try:
        partitions = slurm.partitions()
    except DevenvError:
        partitions = []
    wanted = settings.partition
    chosen = next((p for p in partitions if (p.name == wanted if wanted else p.default)), None)
    has = (f"partition {chosen.name} has {len(chosen.nodes)} ({', '.join(chosen.nodes)})" if chosen else
           "the partition has fewer")
    most = f" --nodes {len(chosen.nodes)}" if chosen and chosen.nodes else ""
    return JobRejected(f"{error.message}: --nodes {settings.nodes} asks for {settings.nodes} node(s), {has}",
                       f"ask for fewer: `devenv sanity {host_name}{most}` (`devenv check {host_name}` lists the "
                       f"partitions and their nodes)")


def _wait(slurm: Slurm, job_id: str, queue_timeout: float, run_timeout: float, say: Callable[[str], None],
          clock: Callable[[], float], sleep: Callable[[float], None], poll_s: float, host_name: str) -> Job:
    """Until the job has ended: at most queue_timeout pending, then at most run_timeout running."""
    pending_until = clock() + queue_timeout
    running_until = None
    said = None
    while True:
        job = slurm.job(job_id)
        if job is None:
            raise JobEnded(f"job {job_id} on {host_name} is gone (Slurm no longer knows it)",
                           "run `devenv sanity` again")
        if job.phase in ("ended", "ending"):
            # by its outcome, which a job still COMPLETING already has in its reason (TimeLimit -> TIMEOUT): a
            # time limit, a cancel, a node failure or a preemption ended it early, and is no verdict
            if job.outcome not in VERDICT_OUTCOMES:
                raise JobEnded(f"the sanity job {job_id} on {host_name} ended before its checks did: "
                               f"{job.end_text()}", EARLY_END_HINTS.get(job.outcome, RUN_AGAIN))
            if job.phase == "ended":
                return job
            text = f"Job {job_id} ending on {job.nodes} (Slurm is cleaning up)"
        elif job.phase == "pending":
            text = f"Job {job_id} pending: {job.pending_text()}"
            if job.hopeless:
                slurm.cancel(job_id)
                raise QueueTimeout(f"job {job_id} can never start on {host_name}: {job.reason} ({job.hopeless}); "
                                   "devenv cancelled it", f"`devenv check {host_name}` shows the partitions")
            if clock() >= pending_until:
                raise QueueTimeout(f"job {job_id} did not start within {queue_timeout:.0f} s on {host_name}: "
                                   f"{job.pending_text()}; devenv cancelled it",
                                   "raise slurm.queue_timeout in the host profile, or ask for fewer nodes")
        else:
            running_until = running_until or clock() + run_timeout
            text = f"Job {job_id} running on {job.nodes}"
            if clock() >= running_until:
                raise JobEnded(f"job {job_id} ran longer than {run_timeout:.0f} s on {host_name}; devenv "
                               "cancelled it", "read its log; a hung rendezvous usually means the nodes cannot "
                               "reach the first node's address")
        if text != said:
            say(text)
            said = text
        sleep(poll_s)


def _read_json(conn: Connection, path: str) -> dict[str, Any] | None:
    result = conn.run(f"cat {shlex.quote(path)}", timeout=30)
    try:
        return json.loads(result.stdout) if result.ok else None
    except ValueError:
        return None


def _seconds(limit: str) -> int:
    """'00:15:00' -> 900; 'D-H:M:S' and 'M' forms too (Slurm's --time)."""
    days, _, rest = limit.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    if days == "" and len(parts) == 1:
        return parts[0] * 60
    while len(parts) < 3:
        parts.append(0) if days else parts.insert(0, 0)
    h, m, s = parts
    return int(days or 0) * 86400 + h * 3600 + m * 60 + s
