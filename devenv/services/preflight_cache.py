"""The preflight of `up`, reused when the host's facts it depends on have not changed (L2).

The full check asks a batch of probes plus network round trips (about 1.5 s on the test host). Its answers
move only when the host does: a reboot, another docker engine or driver, another image, less disk, someone
else on the GPUs. So after a check that passed (no failure), its report is kept with a
fingerprint of those facts (asked before the check, so that a change during it is seen next time); the next
`up` asks ONE probe batch for the fingerprint (and, beside it, sshd's answer to a forwarding channel, no shell)
and reuses the report when it is the same. Anything else (no cache, an unreadable one, another host key, devenv
version, host or environment profile, a fingerprint that differs: boot, user, driver, engine, GPU toolkit, CDI
specs, MIG mode, image, python; a disk now short, a GPU now busy or sick, sshd now refusing forwarding) runs the
full check and caches it anew when it is clean. One 0600 JSON file per (host, environment) under the state dir.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shlex
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

import devenv
from devenv.checks import engine as engine_checks
from devenv.checks import gpu_use
from devenv.checks import health as health_checks
from devenv.checks import host as hc
from devenv.checks.report import FAIL, INFO, PASS, CheckReport, CheckResult
from devenv.config import paths
from devenv.config.profiles import EnvProfile, HostProfile
from devenv.remote.base import Connection
from devenv.services.preflight import _forwarding

log = logging.getLogger(__name__)

FINGERPRINT_TIMEOUT = 30.0
_FORMAT = 2   # 2: the toolkit, CDI and MIG facts, the facts asked before the check


def cache_path(host: str, env: str) -> Path:
    from devenv.env.state import _SAFE

    return paths.state_dir() / "preflight" / _SAFE.sub("_", host) / f"{_SAFE.sub('_', env)}.json"


def fingerprint_probes(host: HostProfile, env: EnvProfile, with_engine: bool, gpus_seen: bool) -> dict[str, str]:
    """The facts the check's answers follow, each one cheap shell command (asked in one batch)."""
    probes = {
        "boot": "cat /proc/sys/kernel/random/boot_id; id -u; id -G",
        # the driver's version from the kernel module (no nvidia-smi run), and which nvidia-smi answers
        "driver": "cat /proc/driver/nvidia/version 2>/dev/null | head -n 1; command -v nvidia-smi; true",
    }
    if with_engine:
        probes["engine"] = ("pid=$(pgrep -o dockerd 2>/dev/null); echo \"dockerd $pid $(cut -d' ' -f22 "
                            "/proc/$pid/stat 2>/dev/null)\"; command -v docker podman; true")
        probes["image"] = (f"docker image inspect {shlex.quote(env.image)} --format '{{{{.Id}}}}' 2>/dev/null "
                           f"|| podman image inspect {shlex.quote(env.image)} --format '{{{{.Id}}}}' 2>/dev/null; true")
        probes["disk"] = engine_checks.disk_probe(host.engine)
        # the GPU hook on dockerd's PATH, nvidia-ctk, the CDI specs: installed or removed without a reboot or a
        # dockerd restart, they change the GPU-access answer (the specs by name, size and time, not read whole)
        probes["toolkit"] = hc.PROBES["toolkit"]
        probes["cdi"] = (f'for d in ${{DEVENV_CDI_SPEC_DIRS:-{engine_checks.CDI_DIRS}}}; do '
                         'ls -lLa --time-style=+%s "$d" 2>/dev/null; done; true')
    else:
        probes["python"] = f"command -v {shlex.quote(host.python)}; ls -lL --time-style=+%s $(command -v " \
                           f"{shlex.quote(host.python)}) 2>/dev/null; true"
        probes["disk"] = hc.home_disk_probe()
    if gpus_seen:
        probes["gpu_use"] = gpu_use.probe()
        probes["mig"] = hc.gpu_probes()["mig"]           # MIG mode changes with a GPU reset, not a reboot
        probes["health"] = health_checks.health_probe()  # judged afresh: a GPU falls sick without a reboot
        probes["xid"] = health_checks.XID_PROBE
    return probes


def _key(conn: Connection, host: HostProfile, env: EnvProfile, allow_busy: bool, with_engine: bool) -> str | None:
    """What the cached report was asked for: devenv's version, the profiles, the connection's host key (None:
    no host key to tie it to, so nothing is cached)."""
    host_key = _host_key(conn, host)
    if host_key is None:
        return None
    spec = json.dumps([devenv.__version__, _FORMAT, asdict(host), asdict(env), allow_busy, with_engine, host_key],
                      sort_keys=True, default=str)
    return hashlib.sha256(spec.encode()).hexdigest()


def _host_key(conn: Connection, host: HostProfile) -> str | None:
    """The host key the connection saw ("local" for this machine); a changed key never meets an old cache."""
    if host.local:
        return "local"
    transport = getattr(conn, "transport", None)
    if transport is None:
        return None
    key = transport().get_remote_server_key()
    return f"{key.get_name()} {key.get_base64()}"


_JUDGED = ("disk", "gpu_use", "health", "xid")   # asked with the fingerprint, judged afresh, not compared


def _facts(out: dict[str, hc.BatchOutput], probes: dict[str, str] | None = None) -> dict[str, str]:
    """The fingerprint: every probe's answer (of those in probes, when given) but the ones judged afresh."""
    return {name: o.stdout for name, o in sorted(out.items())
            if name not in _JUDGED and (probes is None or name in probes)}


def _clean(report: CheckReport) -> bool:
    """A report worth keeping: nothing failed. Its warnings stopped nothing and `up` shows none; those that
    depend on the host (no GPU driver, a small disk, busy GPUs) are in the fingerprint or judged afresh."""
    return report.ok and not any(c.status == FAIL for c in report.checks)


def load(host: str, env: str) -> dict[str, Any] | None:
    try:
        data = json.loads(cache_path(host, env).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def forget(host: str, env: str) -> None:
    cache_path(host, env).unlink(missing_ok=True)


def _save(host: str, env: str, data: dict[str, Any]) -> None:
    path = cache_path(host, env)
    paths.ensure_private_dir(path.parent.parent)
    paths.ensure_private_dir(path.parent)
    paths.write_private(path, json.dumps(data, indent=1, sort_keys=True) + "\n")


def cached_preflight(conn: Connection, host: HostProfile, env: EnvProfile, allow_busy: bool, with_engine: bool,
                     full_check: Callable[[], CheckReport]) -> CheckReport:
    """The last clean check's report when one probe batch says nothing it depends on changed, else
    full_check() (cached when it is clean)."""
    started = time.perf_counter()
    opener = getattr(conn, "open", None)
    if opener is not None:
        opener()  # raises ConnectError: the one fatal condition, as the full check's
    key = _key(conn, host, env, allow_busy, with_engine)
    if key is None:
        return full_check()
    cached = load(host.name, env.name)
    report = _reuse(conn, host, env, allow_busy, with_engine, key, cached, started) if cached else None
    if report is not None:
        log.info("%s: the host's facts are those of the last clean check: its answers stand", host.name)
        return report
    log.info("%s: no clean check with these facts: the full check", host.name)
    # the facts as they are BEFORE the check: a change during or after it then differs next time (asked after
    # the check, a change in between was kept as checked). With the GPU probes: which of them count is known
    # only from the report
    before = _ask(conn, fingerprint_probes(host, env, with_engine, True))
    report = full_check()
    if _clean(report):
        gpus_seen = any(c.id.startswith("gpu.") and c.id.endswith(".use") for c in report.checks)
        facts = _facts(before, fingerprint_probes(host, env, with_engine, gpus_seen))
        _save(host.name, env.name, {"key": key, "gpus_seen": gpus_seen, "facts": facts,
                                    "report": report.to_dict()})
    else:
        forget(host.name, env.name)
    return report


def _ask(conn: Connection, probes: dict[str, str]) -> dict[str, hc.BatchOutput]:
    batch = conn.run(hc.batch_script(probes), timeout=FINGERPRINT_TIMEOUT)
    return hc.parse_batch(batch.stdout, probes)


def _reuse(conn: Connection, host: HostProfile, env: EnvProfile, allow_busy: bool, with_engine: bool, key: str,
           cached: dict[str, Any], started: float) -> CheckReport | None:
    """The cached report, its disk and GPU-use answers judged afresh; None when it cannot stand."""
    try:
        if cached["key"] != key:
            return None
        gpus_seen = bool(cached["gpus_seen"])
        checks = [CheckResult(c["id"], c["title"], c["status"], c["value"], c.get("remedy"), c.get("details") or {})
                  for c in cached["report"]["checks"]]
        facts = cached["facts"]
    except (KeyError, TypeError, ValueError):
        return None  # corrupt or of another format: the full check
    if any(c.status == FAIL for c in checks):
        return None  # never kept so: not trusted
    with ThreadPoolExecutor(max_workers=1) as pool:
        forwarding = pool.submit(_forwarding, conn)   # no shell: one channel, beside the batch
        out = _ask(conn, fingerprint_probes(host, env, with_engine, gpus_seen))
        allowed, detail = forwarding.result()
    if _facts(out) != facts:
        return None
    fresh_forwarding = hc.judge_forwarding(allowed, detail)
    if fresh_forwarding.status != next((c.status for c in checks if c.id == fresh_forwarding.id),
                                       fresh_forwarding.status):
        return None   # sshd's config changed (it is read anew by each login): judged in full
    disk = out["disk"]
    disk_dir, _, df_line = disk.stdout.partition("\n")
    previous = next((c for c in checks if c.id == "disk"), None)
    image_present = bool(previous and previous.details.get("image_present"))
    fresh = [hc.judge_disk(hc.BatchOutput(disk.command, df_line, disk.stderr, disk.exit_code),
                           disk_dir,
                           image_present, env.image_size_gb)]
    if gpus_seen:
        health = health_checks.judge_health(out["health"].stdout, out["health"].exit_code, out["xid"].stdout)
        was = {c.id: c.status for c in checks}
        if any(was.get(c.id) != c.status for c in health):
            return None   # a GPU's health moved (an Xid, ECC errors, a lost GPU): the full check judges it
        fresh += gpu_use.judge_gpu_use(out["gpu_use"].stdout, env.gpus, allow_busy=allow_busy, host=host.name,
                                       t=time.time())
    previous_disk = previous.status if previous else PASS
    if fresh[0].status not in (PASS, previous_disk) or any(c.status not in (PASS, INFO) for c in fresh[1:]):
        return None
    by_id = {c.id: c for c in fresh}
    if gpus_seen and {c.id for c in checks if c.id.startswith("gpu.") and c.id.endswith(".use")} != \
            {c.id for c in fresh[1:] if c.id.endswith(".use")}:
        return None  # other GPUs than before
    checks = [by_id.get(c.id, c) for c in checks]
    return CheckReport(host.name, env.name, checks, time.perf_counter() - started)
