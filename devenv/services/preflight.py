"""`devenv check`: probe a host in one round trip over one connection and judge what it can run (L2)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from devenv.checks import engine as engine_checks
from devenv.checks import gpu_use
from devenv.checks import health as health_checks
from devenv.checks import host as hc
from devenv.checks.compat_findings import compat_checks
from devenv.checks.report import FAIL, CheckReport, CheckResult
from devenv.config.profiles import EnvProfile, HostProfile
from devenv.env import state as envstate
from devenv.gpu import choose as gpu_choose
from devenv.remote.base import Connection

PROBE_TIMEOUT = 30.0


def measure_latency(conn: Connection, rounds: int = 3) -> float | None:
    """The network round trip in ms (median): an SSH keepalive request and its reply, no shell involved.
    None where the connection has no such probe (this machine). The shell's start-up is not measured
    here: every command's Result carries it (startup_s), so the check reads it off the probe batch."""
    ping = getattr(conn, "ping", None)
    if ping is None:
        return None
    return float(statistics.median(ping() * 1000 for _ in range(rounds)))


def run_check(
    conn: Connection,
    host: HostProfile,
    env: EnvProfile,
    on_result: Callable[[CheckResult], None] | None = None,
    allow_busy: bool = False,
    with_engine: bool = False,
) -> CheckReport:
    """Every check for `host` running `env`: with_engine for environments in containers of the host's engine
    (the docker backend's check), else run by the host's python (the host backend's). Connection failures raise
    (nothing else can be checked)."""
    started = time.perf_counter()
    opener = getattr(conn, "open", None)
    if opener is not None:
        opener()  # raises ConnectError: the one fatal condition
    containers = with_engine
    probes = {**hc.PROBES, **hc.gpu_probes(), **engine_checks.PROBES}
    probes["podman_info"] = engine_checks.podman_info_probe(host.engine) if containers else "exit 0"
    probes["docker_endpoint"] = engine_checks.docker_endpoint_probe(host.engine) if containers else "exit 0"
    probes["image"] = engine_checks.image_probe(env.image, host.engine) if containers else "exit 1"
    probes["gpu_use"] = gpu_use.probe()
    probes["health"] = health_checks.health_probe()
    probes["xid"] = health_checks.XID_PROBE
    probes["python"] = hc.python_probe(host.python) if not containers else "exit 0"
    probes["disk"] = engine_checks.disk_probe(host.engine) if containers else hc.home_disk_probe()
    # One round trip for every probe; the latency and forwarding probes (no shell) overlap it.
    with ThreadPoolExecutor(max_workers=2) as pool:
        network = pool.submit(measure_latency, conn)
        forwarding = pool.submit(_forwarding, conn)
        batch = conn.run(hc.batch_script(probes), timeout=PROBE_TIMEOUT)
        network_ms = network.result()
        allowed, detail = forwarding.result()
    command_ms = batch.startup_s * 1000 if batch.startup_s is not None else None
    results: list[CheckResult] = [hc.judge_ssh(host.local, network_ms, _target(host), command_ms)]
    emit = on_result or (lambda r: None)
    emit(results[0])
    out = hc.parse_batch(batch.stdout, probes)
    disk_dir, _, df_line = out["disk"].stdout.partition("\n")
    disk = hc.BatchOutput(out["disk"].command, df_line, out["disk"].stderr, out["disk"].exit_code)

    def add(*checks: CheckResult) -> None:
        for check in checks:
            results.append(check)
            emit(check)

    add(hc.judge_os(out["os"]))
    image = hc.image_facts(out["image"])
    wants_gpu = env.gpus != "none"
    engine = None
    if containers:
        engine = engine_checks.choose_engine(host.engine, out["docker_version"], out["docker_info"], out["podman_info"])
        add(*engine.results)
        _learn_docker_socket(host, engine.name, out["docker_endpoint"])
    else:
        add(hc.judge_python(out["python"], host.python))
    add(hc.judge_disk(disk, disk_dir, image is not None, env.image_size_gb))
    gpu_checks, inventory, _driver_cuda = hc.judge_gpus(out["gpus"], out["nvsmi_header"], wants_gpu)
    add(*gpu_checks)
    if inventory:
        add(*hc.judge_mig(out["mig"]))
        health = health_checks.judge_health(out["health"].stdout, out["health"].exit_code, out["xid"].stdout)
        sick = health_checks.sick_gpus(health)
        use = gpu_use.judge_gpu_use(out["gpu_use"].stdout, env.gpus, allow_busy=allow_busy, host=host.name,
                                    t=time.time(), unhealthy=sick)
        unused = _unused_gpus(env.gpus, sick, use)
        if unused:  # a sick GPU this environment will not get: said, and `up` goes on with the others
            health = health_checks.spare(health, unused, "not used: this environment's GPUs are others")
        add(*health, *use)
    if engine is not None:
        add(engine_checks.judge_gpu_access(engine.name, host.gpu_devices, env.gpus, out["toolkit"], out["cdi_specs"],
                                           engine.docker_info, bool(inventory), wants_gpu))
    add(*compat_checks(env, inventory, image, host_python=_host_torch(results)))
    add(hc.judge_forwarding(allowed, detail))
    report = CheckReport(host.name, env.name, results, time.perf_counter() - started)
    if report.unhealthy:
        report.fail_code = health_checks.EXIT_UNHEALTHY
    return report


def _unused_gpus(gpus: str, sick: dict[int, str], use: list[CheckResult]) -> set[int]:
    """The sick GPUs the environment's `gpus:` leaves out: named others, or N picked from the healthy ones."""
    if not sick:
        return set()
    if gpus == "none":
        return set(sick)
    named = gpu_choose.indices_of(gpus)
    if named is not None:
        return {i for i in sick if i not in named}
    choice = next((r for r in use if r.id == "gpu.choice" and r.status != FAIL), None)
    if gpu_choose.count_of(gpus) is not None and choice is not None:
        return {i for i in sick if i not in choice.details.get("indices", [])}
    return set()


def _learn_docker_socket(host: HostProfile, engine: str | None, endpoint: hc.Output) -> None:
    """Remember the unix socket the host's docker CLI uses (runtimes.docker_api then reaches it without a
    shell); forget it when the CLI now uses another endpoint, or podman is the engine."""
    if host.local:
        return
    socket = engine_checks.docker_socket(endpoint) if engine == "docker" else None
    if envstate.host_facts(host.name).get("docker_socket") != socket:
        envstate.update_host_facts(host.name, docker_socket=socket)


def _forwarding(conn: Connection) -> tuple[bool | None, str]:
    """sshd's answer to a forwarding channel (no shell); None where there is no SSH (this machine)."""
    probe = getattr(conn, "probe_forwarding", None)
    if probe is None:
        return None, "this machine (no SSH tunnel needed)"
    answer: tuple[bool | None, str] = probe()
    return answer


def _target(host: HostProfile) -> str:
    ssh = host.ssh
    if ssh is None:
        return "local"
    return ssh.alias or f"{ssh.user + '@' if ssh.user else ''}{ssh.hostname}"


def _host_torch(results: list[CheckResult]) -> dict[str, Any] | None:
    python = next((r for r in results if r.id == "python"), None)
    return python.details if python and python.details.get("torch") else None
