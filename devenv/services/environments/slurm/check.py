"""`devenv check` on a `runtime: slurm` host (L2): the cluster through its login node, a compute node through
one short job. Slurm's answers are judged by checks/cluster.py, the node's by the single-host judges.

Two round trips to the login node (a batch of Slurm queries; the probe job), whatever the cluster's size.
The probe job asks what an environment job asks, waits for a node at most NODE_WAIT_S (srun --immediate),
and ends by itself: check leaves no job behind.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from devenv.checks import cluster as cc
from devenv.checks import health as health_checks
from devenv.checks import host as hc
from devenv.checks.compat_findings import compat_checks
from devenv.checks.report import FAIL, PASS, CheckReport, CheckResult
from devenv.cluster import slurm_job, slurm_text
from devenv.cluster.slurm_job import SlurmSettings
from devenv.config.profiles import EnvProfile, HostProfile
from devenv.remote.base import Connection
from devenv.services.preflight import PROBE_TIMEOUT, _forwarding, _target, measure_latency

NODE_WAIT_S = 60
NODE_TIMEOUT_S = NODE_WAIT_S + 90.0


def login_probes() -> dict[str, str]:
    fields = "Cluster,Account,Partition,QOS,GrpTRES,MaxTRES,MaxJobs,MaxSubmit,MaxWall"
    return {
        "version": "sinfo --version",
        "partitions": "scontrol --oneliner show partition",
        "nodes": "scontrol --oneliner show node",
        "limits": f'sacctmgr --noheader --parsable2 show association user="$(id -un)" format={fields} 2>&1',
        "pyxis": cc.PYXIS_PROBE,
    }


def node_probes(python: str) -> dict[str, str]:
    return {"node": cc.NODE_NAME_PROBE, "os": hc.PROBES["os"], "gpus": hc.PROBES["gpus"],
            "nvsmi_header": hc.PROBES["nvsmi_header"], "python": hc.python_probe(python),
            "containers": cc.CONTAINER_PROBE, "health": health_checks.health_probe(),
            "xid": health_checks.XID_PROBE}


def parse_limits(out: hc.BatchOutput) -> tuple[bool, list[dict[str, str]], str]:
    text = out.stdout.strip()
    if out.exit_code != 0 or "accounting_storage" in text:
        return False, [], (text.splitlines() or [f"exit code {out.exit_code}"])[0]
    names = ["cluster", "account", "partition", "qos", "grptres", "maxtres", "maxjobs", "maxsubmit", "maxwall"]
    rows = [dict(zip(names, line.split("|"))) for line in text.splitlines() if len(line.split("|")) == len(names)]
    return True, rows, f"{len(rows)} association(s)"


def run_cluster_check(conn: Connection, host: HostProfile, env: EnvProfile,
                      on_result: Callable[[CheckResult], None] | None = None) -> CheckReport:
    """Every check for an environment job on the cluster behind `host`'s login node."""
    started = time.perf_counter()
    settings = host.slurm or SlurmSettings()
    results: list[CheckResult] = []
    emit = on_result or (lambda r: None)

    def add(*checks: CheckResult) -> None:
        for check in checks:
            results.append(check)
            emit(check)

    out = _login_checks(conn, host, add)
    if out is None:
        return CheckReport(host.name, env.name, results, time.perf_counter() - started)
    request = next(r for r in results if r.id == "slurm.request")
    pyxis = "pyxis" in out["pyxis"].stdout

    if request.status == "fail":
        add(cc.judge_containers(None, pyxis), *cc.skipped_node_checks("the job request does not fit (above)"))
    elif request.details.get("usable_nodes", 1) < settings.nodes:   # drained/down: no probe job could start
        add(cc.judge_containers(None, pyxis),
            *cc.skipped_node_checks("no node of the partition can take a job now (above): nothing was submitted"))
    else:
        add(*_node_checks(conn, host, env, settings, pyxis))
    allowed, detail = _forwarding(conn)
    add(hc.judge_forwarding(allowed, detail))
    report = CheckReport(host.name, env.name, results, time.perf_counter() - started)
    if report.unhealthy:  # a sick GPU on the node: UNHEALTHY, as for a plain host
        report.fail_code = health_checks.EXIT_UNHEALTHY
    return report


def run_cluster_preflight(conn: Connection, host: HostProfile, env: EnvProfile) -> CheckReport:
    """The part of the check `up` runs before it submits: the login node's one batch (Slurm, partitions and
    their GRES, whether the request fits, the user's limits), no probe job (the environment's own job is the
    node's test). A request the cluster cannot meet fails with exit 2: the profile asks what is not there."""
    started = time.perf_counter()
    results: list[CheckResult] = []
    _login_checks(conn, host, results.append)
    report = CheckReport(host.name, env.name, results, time.perf_counter() - started)
    if any(r.id == "slurm.request" and r.status == FAIL for r in results):
        report.fail_code = 2
    return report


def _login_checks(conn: Connection, host: HostProfile,
                  add: Callable[..., None]) -> dict[str, hc.BatchOutput] | None:
    """The login node's checks, in one round trip; its probe outputs, None when Slurm does not answer."""
    settings = host.slurm or SlurmSettings()
    opener = getattr(conn, "open", None)
    if opener is not None:
        opener()  # raises ConnectError: nothing else can be checked
    probes = login_probes()
    with ThreadPoolExecutor(max_workers=1) as pool:   # the keepalive round trip overlaps the batch's
        network = pool.submit(measure_latency, conn)
        batch = conn.run(hc.batch_script(probes), timeout=PROBE_TIMEOUT)
        network_ms = network.result()
    command_ms = batch.startup_s * 1000 if batch.startup_s is not None else None
    add(hc.judge_ssh(False, network_ms, _target(host) + " (login node)", command_ms))
    out = hc.parse_batch(batch.stdout, probes)
    version = slurm_text.parse_version(out["version"].stdout) if out["version"].ok else None
    add(cc.judge_slurm(version, (out["version"].stderr or out["version"].stdout).strip()[:200]))
    if version is None:
        return None
    controller_down = cc.judge_controller(out["partitions"])
    if controller_down is not None:
        add(controller_down)
        return None
    partitions = slurm_text.summarize_partitions(slurm_text.parse_records(out["partitions"].stdout),
                                                 slurm_text.parse_records(out["nodes"].stdout))
    for check in cc.judge_partitions(partitions, settings):
        add(check)
    add(cc.judge_limits(*parse_limits(out["limits"])))
    return out


def _node_checks(conn: Connection, host: HostProfile, env: EnvProfile, settings: SlurmSettings,
                 pyxis: bool) -> list[CheckResult]:
    """The single-host checks, run on a compute node inside one short job."""
    probes = node_probes(host.python)
    command = slurm_job.probe_command(settings, ["sh", "-c", hc.batch_script(probes)], NODE_WAIT_S)
    job = conn.run(command, timeout=NODE_TIMEOUT_S)
    out = hc.parse_batch(job.stdout, probes)
    if out["node"].exit_code == 255:     # no answer at all: the job never ran
        said = hc.BatchOutput(command, job.stdout, job.stderr, job.exit_code)
        return [cc.judge_containers(None, pyxis), cc.node_job_failed(said, NODE_WAIT_S),
                *cc.skipped_node_checks("the probe job did not run")]
    node, _, job_id = out["node"].stdout.strip().partition(" ")
    found: list[CheckResult] = [
        CheckResult("node.job", "Probe job on a compute node", PASS, f"job {job_id} ran on {node}",
                    None, {"node": node, "job_id": job_id}),
        cc.judge_containers(out["containers"], pyxis)]
    found += cc.on_node([hc.judge_os(out["os"]), hc.judge_python(out["python"], host.python)], node)
    gpu_checks, inventory, _ = hc.judge_gpus(out["gpus"], out["nvsmi_header"], env.gpus != "none")
    found += cc.on_node(gpu_checks, node)
    # the health section, as a plain host's check has it (checks/health.py), for the node the job ran on
    found += cc.on_node(health_checks.health_section(out["health"].stdout, out["health"].exit_code,
                                                     out["xid"].stdout, bool(inventory), env.gpus, node), node)
    python = next((r for r in found if r.id == "python"), None)
    torch = python.details if python and python.details.get("torch") else None
    found += cc.on_node(compat_checks(env, inventory, None, host_python=torch), node)
    return found
