"""`devenv check`: probe a host in parallel over one connection and judge what it can run (L2)."""

from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from devenv import host_checks as hc
from devenv.compat_bridge import compat_checks
from devenv.errors import ConnectError, DevenvError
from devenv.profiles import EnvProfile, HostProfile
from devenv.remote.base import Connection, Result
from devenv.report import CheckReport, CheckResult

PROBE_TIMEOUT = 30.0


def measure_latency(conn: Connection, rounds: int = 3) -> float:
    """Median round trip of a no-op command, in ms (the first call also opens the connection)."""
    conn.run("true", timeout=PROBE_TIMEOUT)
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        conn.run("true", timeout=PROBE_TIMEOUT)
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def run_check(
    conn: Connection,
    host: HostProfile,
    env: EnvProfile,
    on_result: Callable[[CheckResult], None] | None = None,
) -> CheckReport:
    """Every check for `host` running `env`. Connection failures raise (nothing else can be checked)."""
    started = time.perf_counter()
    latency = measure_latency(conn)  # raises ConnectError: the one fatal condition
    results: list[CheckResult] = [hc.judge_ssh(host.local, latency, _target(host))]
    emit = on_result or (lambda r: None)
    emit(results[0])

    probes = dict(hc.PROBES)
    probes["image"] = hc.image_probe(env.image) if host.runtime == "docker" else "exit 1"
    probes["python"] = hc.python_probe(host.python) if host.runtime == "host" else "exit 0"
    with ThreadPoolExecutor(max_workers=6) as pool:
        futures = {name: pool.submit(_probe, conn, cmd) for name, cmd in probes.items()}
        forwarding = pool.submit(_forwarding, conn)
        out = {name: f.result() for name, f in futures.items()}
        docker_info = hc.parse_docker_json(out["docker_info"]) if out["docker_info"].ok else None
        disk_dir = (docker_info or {}).get("DockerRootDir") or "/var/lib/docker"
        if host.runtime == "host" or out["docker_version"].exit_code == 127:
            disk_dir = "$HOME"
        disk = _probe(conn, hc.disk_probe(disk_dir))
        allowed, detail = forwarding.result()

    def add(*checks: CheckResult) -> None:
        for check in checks:
            results.append(check)
            emit(check)

    add(hc.judge_os(out["os"]))
    image = hc.image_facts(out["image"])
    wants_gpu = env.gpus != "none"
    if host.runtime == "docker":
        add(*hc.judge_docker(out["docker_version"], out["docker_info"]))
    else:
        add(hc.judge_python(out["python"], host.python))
    add(hc.judge_disk(disk, disk_dir, image is not None, env.image_size_gb))
    gpu_checks, inventory, _driver_cuda = hc.judge_gpus(out["gpus"], out["nvsmi_header"], wants_gpu)
    add(*gpu_checks)
    if host.runtime == "docker":
        add(hc.judge_toolkit(out["toolkit"], docker_info, bool(inventory), wants_gpu))
    add(*compat_checks(env, inventory, image, host_python=_host_torch(results)))
    add(hc.judge_forwarding(allowed, detail))
    return CheckReport(host.name, env.name, results, time.perf_counter() - started)


def _probe(conn: Connection, command: str) -> Result:
    try:
        return conn.run(command, timeout=PROBE_TIMEOUT)
    except ConnectError:
        raise
    except DevenvError as exc:  # a probe that hangs is one check's problem, not the whole report's
        return Result(command, "", exc.message, 124)


def _forwarding(conn: Connection) -> tuple[bool | None, str]:
    probe = getattr(conn, "probe_forwarding", None)
    if probe is None:
        return None, "this machine (no SSH tunnel needed)"
    return probe()


def _target(host: HostProfile) -> str:
    ssh = host.ssh
    if ssh is None:
        return "local"
    return ssh.alias or f"{ssh.user + '@' if ssh.user else ''}{ssh.hostname}"


def _host_torch(results: list[CheckResult]) -> dict | None:
    python = next((r for r in results if r.id == "python"), None)
    return python.details if python and python.details.get("torch") else None
