"""L2: run the bundled sanity program on a host and judge its report.

The program (devenv/sanity/scripts/sanity_run.py, torch on the host) is shipped with conn.put into a
private temporary folder, started with the host's python through conn.stream so progress arrives live,
and removed afterwards. The laptop never imports torch: it parses JSON lines and judges them
(devenv/sanity/verdict.py).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from devenv.checks import health as health_checks
from devenv.checks import host as hc
from devenv.checks.report import NO_GPU, CheckResult, Status
from devenv.errors import BadInput, CommandFailed, CommandTimeout, DevenvError
from devenv.gpu import choose as gpu_choose
from devenv.gpu.nvsmi import explain_failure
from devenv.gpu.occupancy import Occupancy, RunIdentity, Sharer, describe_gpu, foreign
from devenv.remote.base import Connection, quote
from devenv.sanity import SCRIPT_NAME, script_bytes
from devenv.sanity import dcgm as dcgm_diag
from devenv.sanity.verdict import (
    Context,
    Json,
    SkuTable,
    Verdict,
    context_for,
    judge_report,
    judge_result,
)
from devenv.services import gpu_occupancy

SUITES = ("quick", "full")
STAGES = ("matmul", "memcpy", "probe", "gpt", "resnet", "compile", "pergpu", "ddp")  # as sanity_run.py names them
INJECTIONS = ("inf", "fp16-no-scaler")
# Whole-run limits: the quick suite takes about a minute on an H200, the full one a few (torch.compile).
TIMEOUTS = {"quick": 900.0, "full": 3600.0}
PYTHON_HINT = ("set `python:` in the host profile to the interpreter that has PyTorch "
               "(for example /opt/torch/.venv/bin/python3), or start an environment with `devenv up`")

EventHandler = Callable[[Json], None]


@dataclass
class SanityReport:
    host: str
    suite: str
    report: Json  # the program's final JSON report (fingerprint + every result), as sent
    verdict: Verdict
    wall_s: float  # laptop-side, command to verdict
    log_tail: list[str] = field(default_factory=list)  # lines on stdout that were not JSON
    sharing: Json | None = None  # who else was on the run's GPUs (None: not watched, e.g. no host connection)
    health: list[CheckResult] = field(default_factory=list)  # the run's GPUs' health (checks.health)

    def to_dict(self) -> Json:
        return {"host": self.host, "suite": self.suite, "wall_s": self.wall_s,
                "verdict": self.verdict.to_dict(), "report": self.report, "sharing": self.sharing,
                "health": [r.to_dict() for r in self.health]}


def run_sanity(conn: Connection, python: str = "python3", suite: str = "quick",
               on_event: EventHandler | None = None, *, inject: str | None = None,
               only: Sequence[str] = (), table: SkuTable | None = None,
               timeout: float | None = None, host_conn: Connection | None = None, container: str | None = None,
               gpus: str | None = None, among: list[int] | None = None, allow_busy: bool = False,
               wait_idle: float | None = None, on_wait: Callable[[str], None] | None = None,
               watch_every_s: float = 2.0, dcgm: int | None = None) -> SanityReport:
    """Ship and run the sanity program on `conn`'s host; call on_event for each event as it arrives.

    on_event gets the program's event dicts ("start", "progress", "result"); a "result" event carries an
    extra key "checks": the verdict's checks for that result alone (list of Check), so a front end can show
    pass/fail live. `only` limits the run to some stages (STAGES). Raises DevenvError (with a hint) when
    python or torch is missing or the run breaks.

    host_conn: the GPU host itself (conn may be a container on it): its GPUs are sampled before and during the
    run, and other processes on the run's GPUs make the verdict BUSY (speed not judged) unless allow_busy.
    container: the container conn runs in (to tell the run's own processes). gpus: which GPUs to run on
    (devenv.gpu.choose spelling; among: the ones the environment has). wait_idle: wait so long for them to be
    free first, telling on_wait. dcgm: also run DCGM's diagnostics at that level (1-3) on the host after the
    run and fold its results into the verdict (a host without DCGM: said, with what devenv ran instead).
    """
    if suite not in SUITES:
        raise DevenvError(f"unknown sanity suite '{suite}'", f"choose one of: {', '.join(SUITES)}")
    if inject is not None and inject not in INJECTIONS:
        raise DevenvError(f"unknown fault to inject '{inject}'", f"choose one of: {', '.join(INJECTIONS)}")
    unknown = [s for s in only if s not in STAGES]
    if unknown:
        raise DevenvError(f"unknown sanity stage(s): {', '.join(unknown)}", f"choose from: {', '.join(STAGES)}")
    if dcgm is not None and dcgm not in dcgm_diag.LEVELS:
        raise BadInput(f"unknown DCGM level {dcgm}", "choose 1 (seconds), 2 (minutes) or 3 (about half an hour)")
    started = time.monotonic()
    _check_python(conn, python)
    no_gpu_why: list[str] = []
    # the host's GPUs' health first: a choice of GPUs skips the sick ones, and a sick GPU's speed is not judged
    health_all = _health(host_conn) if host_conn is not None else []
    before, choice = _before_run(host_conn, conn.name, gpus, among, allow_busy, wait_idle, on_wait, no_gpu_why,
                                 sick=health_checks.sick_gpus(health_all))
    visible = f"CUDA_VISIBLE_DEVICES={quote(','.join(u for u in choice.uuids if u))} " if choice else ""
    pid: dict[str, int] = {}

    def seen(event: Json) -> None:
        if event.get("event") == "start" and isinstance(event.get("pid"), int):
            pid["run"] = event["pid"]
        if on_event is not None:
            on_event(event)

    health = _for_choice(health_all, choice) if before is not None else []
    workdir = _make_workdir(conn)
    watch = (gpu_occupancy.Watch(host_conn, every_s=watch_every_s, extra=health_checks.link_probe())
             if before is not None and host_conn else None)
    try:
        conn.put(script_bytes(), f"{workdir}/{SCRIPT_NAME}", 0o644)  # inside a 0700 folder
        command = (f"cd {quote(workdir)} && {visible}PYTHONUNBUFFERED=1 exec {quote(python)} {SCRIPT_NAME} "
                   f"--suite {suite} --json-lines" + (f" --inject {inject}" if inject else "")
                   + (f" --only {','.join(only)}" if only else ""))
        if watch is not None:
            watch.start()
        try:
            report, log_tail = _stream_events(conn, command, python, seen, table,
                                              timeout if timeout is not None else TIMEOUTS[suite])
        finally:
            during = watch.stop() if watch is not None else []
        if host_conn is not None and before is not None:
            during.append(gpu_occupancy.sample(host_conn, pmon=True))  # once more as the report arrives
    finally:
        _remove_workdir(conn, workdir)
    shared: dict[int | None, str] = {}
    idle: dict[int | None, str] = {}
    sharing = None
    if before is not None and host_conn is not None:
        me = RunIdentity(pid.get("run"), container)
        shared, idle, sharing = _sharing(host_conn, report, [before, *during], me, choice)
        health = health + _links(during, report, choice, before)
        if dcgm is not None:
            health += _dcgm(host_conn, dcgm, choice, on_wait)
        health = _in_run_order(health, report, choice)
    verdict = judge_report(report, table, shared=shared, allow_busy=allow_busy, idle=idle, health=health)
    if verdict.status == NO_GPU and no_gpu_why:  # say why the host has no GPU to offer, as check does
        verdict = replace(verdict, summary=f"{verdict.summary}; the host's nvidia-smi: {no_gpu_why[0]}")
    return SanityReport(host=conn.name, suite=suite, report=report, verdict=verdict,
                        wall_s=time.monotonic() - started, log_tail=log_tail, sharing=sharing, health=health)


def _health(host_conn: Connection) -> list[CheckResult]:
    """The health section of `check` for the host's GPUs, read before the run in one round trip: a sick GPU is
    said before its speed is judged."""
    probes = {"health": health_checks.health_probe(), "xid": health_checks.XID_PROBE}
    try:
        batch = host_conn.run(hc.batch_script(probes), timeout=60)
    except DevenvError:
        return []  # the occupancy sample just worked: a failure here leaves health unsaid, not the run unjudged
    out = hc.parse_batch(batch.stdout, probes)
    if out["health"].exit_code == 255 and not out["health"].stdout:
        return []  # the batch gave no answer (a host without a shell as devenv expects): health unsaid
    return health_checks.judge_health(out["health"].stdout, out["health"].exit_code, out["xid"].stdout)


def _for_choice(health: list[CheckResult], choice: gpu_choose.Choice | None) -> list[CheckResult]:
    """The findings of the chosen GPUs (all when none were chosen) and the host's own (Xid lines)."""
    uuids = {u for u in choice.uuids if u} if choice is not None else set()
    if not uuids:
        return health
    return [r for r in health if not r.details.get("uuid") or r.details["uuid"] in uuids]


def _dcgm(host_conn: Connection, level: int, choice: gpu_choose.Choice | None,
          on_wait: Callable[[str], None] | None) -> list[CheckResult]:
    """DCGM's diagnostics on the run's GPUs, after the run (they load the GPU themselves)."""
    if on_wait is not None:
        on_wait(f"running `dcgmi diag -r {level}` on {host_conn.name}...")
    command = dcgm_diag.diag_command(level, list(choice.indices) if choice is not None else None)
    try:
        result = host_conn.run(command, timeout=dcgm_diag.TIMEOUTS[level])
    except CommandTimeout:
        return [CheckResult("dcgm", f"DCGM diag -r {level}", Status.WARN,
                            f"did not finish within {dcgm_diag.TIMEOUTS[level]:g} s",
                            "run `dcgmi diag -r 1` on the host to see whether DCGM works there")]
    if result.exit_code == 127:
        return [dcgm_diag.not_installed(level, host_conn.name)]
    return dcgm_diag.judge_diag(dcgm_diag.parse_diag(result.stdout + result.stderr, level))


def _links(during: list[Occupancy], report: Json, choice: gpu_choose.Choice | None,
           before: Occupancy) -> list[CheckResult]:
    """The PCIe links of the run's GPUs as sampled while it worked them."""
    uuids = _run_uuids(report, choice)
    index_of = {g.uuid: g.index for g in before.gpus if g.uuid}
    return health_checks.judge_links([s.tail for s in during], uuids or None, index_of)


def _run_uuids(report: Json, choice: gpu_choose.Choice | None) -> list[str]:
    fp = report.get("fingerprint") or {}
    uuids = [g.get("uuid") for g in fp.get("gpus") or [] if g.get("uuid")]
    if choice is not None and not uuids:
        uuids = [u for u in choice.uuids if u]
    return uuids


def _in_run_order(health: list[CheckResult], report: Json, choice: gpu_choose.Choice | None) -> list[CheckResult]:
    """Each finding with its GPU's index in the run (details["gpu_in_run"]), for the verdict's per-GPU lines."""
    uuids = _run_uuids(report, choice)
    return [replace(r, details={**r.details, "gpu_in_run": uuids.index(r.details["uuid"])})
            if r.details.get("uuid") in uuids else r for r in health]


def _before_run(host_conn: Connection | None, host: str, gpus: str | None, among: list[int] | None,
                allow_busy: bool, wait_idle: float | None, on_wait: Callable[[str], None] | None,
                no_gpu_why: list[str] | None = None,
                sick: dict[int, str] | None = None) -> tuple[Occupancy | None, gpu_choose.Choice | None]:
    """(the look at the host's GPUs just before the run, the GPUs chosen for it: None = as the run finds them).
    Waits for free GPUs when asked to."""
    asked = gpus if gpus not in (None, "all") else None
    if host_conn is None:
        if asked or wait_idle:
            raise DevenvError(f"choosing or waiting for GPUs needs {host}'s own connection",
                              "run `devenv sanity` against the host profile")
        return None, None
    if wait_idle:
        choice, before = gpu_occupancy.wait_free(host_conn, gpus or "all", host=host, timeout_s=wait_idle,
                                                 among=among, on_wait=on_wait)
        if on_wait is not None:
            on_wait(f"GPU {choice.gpus} free: starting")
        return before, choice if asked else None
    before = gpu_occupancy.sample(host_conn, pmon=True)
    if not before.gpus:
        if asked:
            raise DevenvError(f"cannot choose GPUs on {host}: {before.error}", "check the driver with `devenv check`")
        if no_gpu_why is not None:
            code = re.search(r"exit code (\d+)", before.error or "")
            what, _ = explain_failure(before.error or "", int(code.group(1)) if code else -1)
            no_gpu_why.append(what)
        return None, None  # no GPU to watch: the run itself will say so (no-gpu)
    if not asked:
        return before, None
    states = gpu_choose.mark_unhealthy(gpu_choose.gpu_states(before), sick or {})
    if on_wait is not None and gpu_choose.count_of(asked) is not None:
        for state in states:
            if state.unhealthy:
                on_wait(f"{state.describe()}: not picked")
    return before, gpu_occupancy.pick(states, asked, host=host, allow_busy=True if gpu_choose.count_of(asked) is None
                                      else allow_busy, among=among)


def _sharing(host_conn: Connection, report: Json, samples: list[Occupancy], me: RunIdentity,
             choice: gpu_choose.Choice | None) -> tuple[dict[int | None, str], dict[int | None, str], Json]:
    """(the run's GPU index -> who else worked on it, for the verdict; the same for idle co-tenants, who held
    memory and no SM time in any sample (Sharer.idle); the record kept with the report)."""
    fp = report.get("fingerprint") or {}
    uuids = [g.get("uuid") for g in fp.get("gpus") or []]
    if choice is not None and not all(uuids):
        uuids = list(choice.uuids)  # CUDA_VISIBLE_DEVICES lists them in the run's order
    on_host = {g.uuid for occ in samples for g in occ.gpus if g.uuid}
    # the run's GPUs by UUID, when the host's nvidia-smi knows them all (else: watch every GPU of the host)
    known = bool(uuids) and all(u in on_host for u in uuids)
    others = foreign(samples, me, uuids if known else None)
    sharers = gpu_occupancy.name_containers(host_conn, [s for found in others.values() for s in found])
    shared = _by_run_gpu([s for s in sharers if not s.idle], uuids, known, "was shared with")
    idle = _by_run_gpu([s for s in sharers if s.idle], uuids, known, "also held")
    record = {"samples": len(samples), "run_pid": me.pid, "container": me.container,
              "gpu_uuids": uuids if known else None,
              "others": [{**s.to_dict(), "idle": s.idle} for s in sharers],
              "before": samples[0].to_dict() if samples else None}
    return shared, idle, record


def _by_run_gpu(sharers: list[Sharer], uuids: list[str], known: bool, verb: str) -> dict[int | None, str]:
    """The run's GPU index (None: which GPU the run used is unknown) -> 'GPU 0 <verb> pid 820 (...)'."""
    by_uuid: dict[str, list[Sharer]] = {}
    for s in sharers:
        by_uuid.setdefault(s.gpu_uuid or "", []).append(s)
    out: dict[int | None, str] = {}
    if known:
        for k, uuid in enumerate(uuids):
            if uuid in by_uuid:
                out[k] = describe_gpu(by_uuid[uuid][0].gpu_index, by_uuid[uuid], verb)
    elif by_uuid:  # which GPU the run used is unknown: any GPU of the host (of the choice) counts
        out[None] = "; ".join(describe_gpu(found[0].gpu_index, found, verb) for found in by_uuid.values())
    return out


def _check_python(conn: Connection, python: str) -> None:
    probe = conn.run(f"{quote(python)} -c 'import sys; print(sys.version_info[0])'", timeout=60)
    if probe.exit_code == 127 or (not probe.ok and "not found" in (probe.stderr or "")):
        raise DevenvError(f"python '{python}' was not found on {conn.name}", PYTHON_HINT)
    if not probe.ok:
        raise DevenvError(f"python '{python}' does not start on {conn.name}: "
                          f"{_last_line(probe.stderr or probe.stdout)}", PYTHON_HINT)
    if probe.stdout.strip() != "3":
        raise DevenvError(f"'{python}' on {conn.name} is not Python 3", PYTHON_HINT)


def _make_workdir(conn: Connection) -> str:
    # mktemp -d makes a fresh 0700 folder: no other user can swap the script before it runs
    made = conn.run("mktemp -d /tmp/devenv-sanity-XXXXXXXX", timeout=30)
    path = made.stdout.strip()
    if not made.ok or not path.startswith("/tmp/devenv-sanity-"):
        raise DevenvError(f"cannot make a temporary folder on {conn.name}: {_last_line(made.stderr)}",
                          "check that /tmp exists and is writable on the host")
    return path


def _remove_workdir(conn: Connection, path: str) -> None:
    try:
        conn.run(f"rm -rf {quote(path)}", timeout=30)
    except DevenvError:
        pass  # a leftover private temp folder is not worth hiding the run's own outcome


def _stream_events(conn: Connection, command: str, python: str, on_event: EventHandler | None,
                   table: SkuTable | None, timeout: float) -> tuple[Json, list[str]]:
    report: Json | None = None
    fatal: Json | None = None
    noise: list[str] = []
    ctx: Context | None = None
    failed: CommandFailed | None = None
    try:
        for line in conn.stream(command, timeout=timeout):
            event = _parse(line)
            if event is None:
                if line.strip():
                    noise = (noise + [line.rstrip()])[-20:]
                continue
            kind = event.get("event")
            if kind == "report":
                report = event
                continue
            if kind == "fatal":
                fatal = event
                continue
            if kind == "result":
                if event.get("kind") == "fingerprint":
                    ctx = context_for(event, table)
                if ctx is not None:
                    body = {k: v for k, v in event.items() if k != "event"}
                    event = {**event, "checks": judge_result(body, ctx)}
            if on_event is not None:
                on_event(event)
    except CommandFailed as exc:
        failed = exc
    except CommandTimeout as exc:
        raise DevenvError(f"the sanity run on {conn.name} did not finish within {timeout:g} s",
                          "the GPU may be busy with other work; check `devenv monitor`, then try again") from exc
    if fatal is not None:
        raise _fatal_error(conn.name, python, fatal)
    if report is None:
        detail = ""
        if failed is not None:
            detail = f" (exit code {failed.result.exit_code}): {_last_line(failed.result.stderr)}"
        elif noise:
            detail = f": {noise[-1]}"
        raise DevenvError(f"the sanity run on {conn.name} ended without a report{detail}",
                          "run it again with DEVENV_DEBUG=1; if it repeats, the host's python or GPU "
                          "stack is broken (try `devenv check`)")
    return report, noise


def _fatal_error(host: str, python: str, fatal: Json) -> DevenvError:
    what = fatal.get("error")
    message = str(fatal.get("message") or what)
    if what == "no-torch":
        return DevenvError(f"PyTorch is not importable with '{python}' on {host}", PYTHON_HINT)
    if what == "no-cuda":
        return DevenvError(f"torch sees no CUDA GPU on {host}",
                           "check the driver with `devenv check`, and that this python's torch is a CUDA build")
    return DevenvError(f"the sanity program failed on {host}: {message}",
                       "run it again with DEVENV_DEBUG=1, and report it if it repeats")


def _parse(line: str) -> Json | None:
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) and "event" in event else None


def _last_line(text: str | None) -> str:
    lines = [x for x in (text or "").strip().splitlines() if x.strip()]
    return lines[-1].strip() if lines else ""
