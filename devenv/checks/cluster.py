"""What `devenv check` says about a Slurm cluster (L0: pure judges, fed recorded real outputs in tests).

The login node answers for the cluster (Slurm's version, partitions with their GPUs, the user's limits); a
short job answers for a compute node (driver, GPUs, python and torch, container tools), judged by the same
single-host judges as a plain host (checks/host.py), so a cluster and a box are held to one standard.
"""

from __future__ import annotations

import dataclasses

from devenv.checks.host import Output
from devenv.checks.report import FAIL, INFO, PASS, SKIP, WARN, CheckResult
from devenv.cluster.slurm_job import SlurmSettings
from devenv.cluster.slurm_text import PartitionInfo, command_failure

# On the compute node: the container tools a cluster may offer inside a job (enroot/pyxis, apptainer).
CONTAINER_PROBE = ('for b in enroot apptainer singularity; do p=$(command -v "$b" 2>/dev/null) && '
                   'echo "$b $p $("$b" --version 2>&1 | head -n 1)"; done; true')
# On the login node: pyxis adds --container-image to srun.
PYXIS_PROBE = "srun --help 2>&1 | grep -q -- --container-image && echo pyxis; true"
NODE_NAME_PROBE = 'echo "${SLURMD_NODENAME:-$(hostname)} ${SLURM_JOB_ID:-?}"'


def judge_slurm(version: str | None, detail: str = "") -> CheckResult:
    if version is None:
        return CheckResult("slurm.version", "Slurm on the login node", FAIL,
                           f"no Slurm commands answer on the login node{': ' + detail if detail else ''}",
                           "is this the cluster's login node? `sinfo --version` must work there (a module load "
                           "in ~/.bashrc is not read by non-interactive shells: put Slurm on PATH in ~/.profile "
                           "or the ssh environment)")
    return CheckResult("slurm.version", "Slurm on the login node", PASS, f"Slurm {version}", None,
                       {"version": version})


def judge_controller(partitions: Output) -> CheckResult | None:
    """None when Slurm's controller answered the partitions probe. When it did not (slurmctld down, or not
    reachable from the login node) nothing about partitions or the request can be said: no "partition does not
    exist" for a cluster that could not be asked."""
    if partitions.exit_code == 0:
        return None
    why, hint = command_failure(partitions.stderr or partitions.stdout, partitions.exit_code)
    return CheckResult("slurm.controller", "Slurm's controller", FAIL, f"the login node cannot ask it: {why}",
                       hint)


def describe_partition(p: PartitionInfo) -> str:
    states = ", ".join(f"{n} {s}" for s, n in sorted(p.node_states.items())) or "no nodes"
    gpus = (f"GPUs {p.gpus_free}/{p.gpus_total} free" + (f" ({', '.join(sorted(p.gpu_types))})"
                                                           if p.gpu_types else "")) if p.gpus_total else "no GPUs"
    return (f"{p.state.lower()}, {len(p.nodes)} node(s) ({states}), CPUs {p.cpus_free}/{p.cpus_total} free, "
            f"{gpus}, max time {p.max_time.lower()}")


def judge_partitions(partitions: list[PartitionInfo], settings: SlurmSettings) -> list[CheckResult]:
    """One line per partition, then whether the profile's request fits the partition it names (or the default)."""
    results = [CheckResult(f"slurm.partition.{p.name}", f"Partition {p.name}" + (" (default)" if p.default else ""),
                           INFO, describe_partition(p), None, p.to_dict()) for p in partitions]
    known = ", ".join(p.name + ("*" if p.default else "") for p in partitions) or "none"
    wanted = settings.partition
    chosen = next((p for p in partitions if p.name == wanted), None) if wanted else \
        next((p for p in partitions if p.default), None)
    title = "Job request fits the partition"
    if chosen is None:
        if wanted:
            return results + [CheckResult("slurm.request", title, FAIL,
                                          f"partition '{wanted}' does not exist (partitions: {known}; * = default)",
                                          "set slurm.partition in the host profile to one of them")]
        return results + [CheckResult("slurm.request", title, FAIL, f"no default partition (partitions: {known})",
                                      "set slurm.partition in the host profile")]
    problems, waits = [], []
    if chosen.state.upper() != "UP":
        problems.append(f"partition {chosen.name} is {chosen.state.lower()}")
    if settings.nodes > len(chosen.nodes):
        problems.append(f"{settings.nodes} node(s) asked, the partition has {len(chosen.nodes)}")
    if settings.gpus_per_node:
        if not chosen.gpus_total:
            problems.append(f"{settings.gpus_per_node} GPU(s) per node asked, partition {chosen.name} has no GPUs")
        elif settings.gpu_type and settings.gpu_type not in chosen.gpu_types:
            problems.append(f"GPU type '{settings.gpu_type}' asked, partition {chosen.name} has "
                            f"{', '.join(sorted(chosen.gpu_types)) or 'untyped GPUs'}")
        elif chosen.gpus_free < settings.gpus_per_node * settings.nodes:
            waits.append(f"{chosen.gpus_free} GPU(s) free now, {settings.gpus_per_node * settings.nodes} asked")
    free_nodes = sum(n for s, n in chosen.node_states.items() if s in ("idle", "mixed"))
    if not problems and free_nodes < settings.nodes:
        waits.append(f"{free_nodes} node(s) idle or mixed now, {settings.nodes} asked")
    asked = (f"partition {chosen.name}, {settings.nodes} node(s), time {settings.time}"
             + (f", {settings.gpus_per_node} GPU(s)/node" if settings.gpus_per_node else ", no GPU"))
    if problems:
        hint = ("set slurm.gpus_per_node: 0 for a CPU job, or pick a partition with GPUs"
                if any("GPU" in p for p in problems) else "change the host profile's slurm: settings")
        return results + [CheckResult("slurm.request", title, FAIL, f"{asked}: " + "; ".join(problems), hint)]
    if waits:
        return results + [CheckResult("slurm.request", title, WARN, f"{asked}: " + "; ".join(waits),
                                      "the job will queue until resources free up (`devenv up` shows the "
                                      "pending reason and waits at most slurm.queue_timeout)")]
    return results + [CheckResult("slurm.request", title, PASS, f"{asked}: can start now")]


def judge_limits(accounting: bool, rows: list[dict[str, str]], detail: str) -> CheckResult:
    """The user's associations (account, partition, QOS, GPU and job limits) where accounting is configured."""
    title = "Your limits (sacctmgr)"
    if not accounting:
        return CheckResult("slurm.limits", title, INFO, f"not available: {detail or 'no accounting'}", None,
                           {"accounting": False})
    if not rows:
        return CheckResult("slurm.limits", title, WARN, "accounting is on, but you have no association",
                           "ask the cluster's admins for an account (sbatch refuses jobs without one)",
                           {"accounting": True, "associations": []})
    parts = []
    for row in rows:
        limits = [f"{k}={row[k]}" for k in ("grptres", "maxtres", "maxjobs", "maxsubmit", "maxwall") if row.get(k)]
        where = row.get("account", "?") + (f"/{row['partition']}" if row.get("partition") else "")
        parts.append(f"{where} (qos {row.get('qos') or '-'})" + (": " + " ".join(limits) if limits else ""))
    return CheckResult("slurm.limits", title, INFO, "; ".join(parts), None, {"accounting": True,
                                                                             "associations": rows})


def judge_containers(node_tools: Output | None, pyxis: bool) -> CheckResult:
    """The container tools a job can use: pyxis (srun --container-image, enroot), apptainer/singularity."""
    title = "Containers in jobs"
    tools = []
    if node_tools is not None and node_tools.exit_code == 0:
        for line in node_tools.stdout.splitlines():
            name, _, rest = line.partition(" ")
            if name:
                version = rest.partition(" ")[2].strip()
                tools.append(f"{name} {version}".strip())
    if pyxis:
        tools.insert(0, "pyxis (srun --container-image)")
    if not tools:
        return CheckResult("slurm.containers", title, INFO, "none found (enroot/pyxis, apptainer): the "
                           "environment runs with the compute node's python", None, {"tools": []})
    return CheckResult("slurm.containers", title, INFO, ", ".join(tools), None, {"tools": tools})


def node_job_failed(out: Output, wait_s: int) -> CheckResult:
    """The probe job did not run: queued too long (--immediate), or Slurm refused it."""
    said = [ln.strip() for ln in (out.stderr + out.stdout).splitlines() if ln.strip()]
    text = "; ".join(ln.removeprefix("srun: error: ").removeprefix("srun: ") for ln in said[-2:]) or \
        f"exit code {out.exit_code}"
    waited = " ".join(said).lower()
    if "queued and waiting" in waited or "nodes are busy" in waited or "immediate" in waited:
        return CheckResult("node.job", "Probe job on a compute node", WARN,
                           f"no node free within {wait_s} s: the compute nodes were not probed ({text})",
                           "run `devenv check` again when the queue is shorter")
    return CheckResult("node.job", "Probe job on a compute node", FAIL, f"Slurm did not run the probe job: {text}",
                       "the same request is what `devenv up` submits: fix the host profile's slurm: settings")


def on_node(results: list[CheckResult], node: str) -> list[CheckResult]:
    """Single-host results, titled with the compute node they were seen on."""
    return [dataclasses.replace(r, title=f"{r.title} ({node})") for r in results]


def skipped_node_checks(reason: str) -> list[CheckResult]:
    return [CheckResult("nvidia.driver", "NVIDIA driver (compute node)", SKIP, reason),
            CheckResult("python", "Python on the compute node", SKIP, reason)]
