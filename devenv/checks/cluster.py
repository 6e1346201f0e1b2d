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
    chosen = chosen_partition(partitions, settings)
    title = "Job request fits the partition"
    if chosen is None:
        if wanted:
            return results + [CheckResult("slurm.request", title, FAIL,
                                          f"partition '{wanted}' does not exist (partitions: {known}; * = default)",
                                          "set slurm.partition in the host profile to one of them")]
        return results + [CheckResult("slurm.request", title, FAIL, f"no default partition (partitions: {known})",
                                      "set slurm.partition in the host profile")]
    results.append(judge_nodes(chosen))
    problems, waits = [], []
    hint = None
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
    usable = chosen.usable_nodes
    free = chosen.free_nodes
    unusable = [n for n in chosen.node_info if not n.usable]
    if not problems and len(usable) < settings.nodes:
        # drained, down, failed, not responding, reserved: no waiting in the queue helps until they come back
        said = "; ".join(f"{n.name} {n.describe()}" for n in unusable)
        waits.append((f"no node of partition {chosen.name} can take a job now" if not usable else
                      f"only {len(usable)} node(s) of partition {chosen.name} can take jobs, {settings.nodes} "
                      f"asked") + (f" ({said})" if said else ""))
        hint = ("the job would wait (ReqNodeNotAvail) until an administrator resumes these nodes; `sinfo -R` on "
                "the login node lists why they are out, or pick another partition (slurm.partition)")
    elif not problems and len(free) < settings.nodes:
        booting = [n for n in usable if n.booting]
        waits.append(f"{len(free)} node(s) idle or mixed now, {settings.nodes} asked"
                     + (f"; {', '.join(n.name for n in booting)} must boot first" if booting else ""))
        hint = ("the job will queue until resources free up (`devenv up` shows the pending reason and waits at "
                "most slurm.queue_timeout)")
    asked = (f"partition {chosen.name}, {settings.nodes} node(s), time {settings.time}"
             + (f", {settings.gpus_per_node} GPU(s)/node" if settings.gpus_per_node else ", no GPU"))
    details = {"partition": chosen.name, "usable_nodes": len(usable), "free_nodes": len(free)}
    if problems:
        hint = ("set slurm.gpus_per_node: 0 for a CPU job, or pick a partition with GPUs"
                if any("GPU" in p for p in problems) else "change the host profile's slurm: settings")
        return results + [CheckResult("slurm.request", title, FAIL, f"{asked}: " + "; ".join(problems), hint,
                                      details)]
    if waits:
        return results + [CheckResult("slurm.request", title, WARN, f"{asked}: " + "; ".join(waits), hint,
                                      details)]
    return results + [CheckResult("slurm.request", title, PASS, f"{asked}: can start now", None, details)]


def judge_nodes(partition: PartitionInfo) -> CheckResult:
    """Each node of the partition a job goes to, in Slurm's state words, with the reason an admin gave."""
    title = f"Nodes of partition {partition.name}"
    nodes = partition.node_info
    if not nodes:
        return CheckResult("slurm.nodes", title, WARN, "the partition has no nodes",
                           "pick another partition (slurm.partition)")
    said = "; ".join(f"{n.name} {n.describe()}" for n in nodes)
    out = [n for n in nodes if not n.usable]
    details = {"nodes": [{"name": n.name, "state": n.word, "usable": n.usable, "reason": n.reason}
                         for n in nodes]}
    if out:
        return CheckResult("slurm.nodes", title, WARN, f"{len(out)} of {len(nodes)} take no jobs: {said}",
                           "`sinfo -R` on the login node lists why; an administrator resumes them "
                           "(scontrol update nodename=NODE state=resume)", details)
    return CheckResult("slurm.nodes", title, INFO, said, None, details)


def chosen_partition(partitions: list[PartitionInfo], settings: SlurmSettings) -> PartitionInfo | None:
    """The partition the profile's jobs go to: the one it names, else the cluster's default."""
    if settings.partition:
        return next((p for p in partitions if p.name == settings.partition), None)
    return next((p for p in partitions if p.default), None)


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
    """Single-host results, titled with the compute node they were seen on (and its name in their details)."""
    return [dataclasses.replace(r, title=f"{r.title} ({node})", details={**r.details, "node": node}) for r in results]


def skipped_node_checks(reason: str) -> list[CheckResult]:
    return [CheckResult("nvidia.driver", "NVIDIA driver (compute node)", SKIP, reason),
            CheckResult("python", "Python on the compute node", SKIP, reason)]
