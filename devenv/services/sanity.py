"""L2: run the bundled sanity program on a host and judge its report.

The program (devenv/sanity/scripts/sanity_run.py, torch on the host) is shipped with conn.put into a
private temporary folder, started with the host's python through conn.stream so progress arrives live,
and removed afterwards. The laptop never imports torch: it parses JSON lines and judges them
(devenv/sanity/verdict.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from devenv.errors import CommandFailed, CommandTimeout, DevenvError
from devenv.remote.base import Connection, quote
from devenv.sanity import SCRIPT_NAME, script_bytes
from devenv.sanity.verdict import (
    Context,
    SkuTable,
    Verdict,
    context_for,
    judge_report,
    judge_result,
)

SUITES = ("quick", "full")
STAGES = ("matmul", "memcpy", "probe", "gpt", "resnet", "compile", "pergpu", "ddp")  # as sanity_run.py names them
INJECTIONS = ("inf", "fp16-no-scaler")
# Whole-run limits: the quick suite takes about a minute on an H200, the full one a few (torch.compile).
TIMEOUTS = {"quick": 900.0, "full": 3600.0}
PYTHON_HINT = ("set `python:` in the host profile to the interpreter that has PyTorch "
               "(for example /opt/torch/.venv/bin/python3), or start an environment with `devenv up`")

EventHandler = Callable[[dict], None]


@dataclass
class SanityReport:
    host: str
    suite: str
    report: dict  # the program's final JSON report (fingerprint + every result), as sent
    verdict: Verdict
    wall_s: float  # laptop-side, command to verdict
    log_tail: list[str] = field(default_factory=list)  # lines on stdout that were not JSON

    def to_dict(self) -> dict:
        return {"host": self.host, "suite": self.suite, "wall_s": self.wall_s,
                "verdict": self.verdict.to_dict(), "report": self.report}


def run_sanity(conn: Connection, python: str = "python3", suite: str = "quick",
               on_event: EventHandler | None = None, *, inject: str | None = None,
               only: Sequence[str] = (), table: SkuTable | None = None,
               timeout: float | None = None) -> SanityReport:
    """Ship and run the sanity program on `conn`'s host; call on_event for each event as it arrives.

    on_event gets the program's event dicts ("start", "progress", "result"); a "result" event carries an
    extra key "checks": the verdict's checks for that result alone (list of Check), so a front end can show
    pass/fail live. `only` limits the run to some stages (STAGES). Raises DevenvError (with a hint) when
    python or torch is missing or the run breaks.
    """
    if suite not in SUITES:
        raise DevenvError(f"unknown sanity suite '{suite}'", f"choose one of: {', '.join(SUITES)}")
    if inject is not None and inject not in INJECTIONS:
        raise DevenvError(f"unknown fault to inject '{inject}'", f"choose one of: {', '.join(INJECTIONS)}")
    unknown = [s for s in only if s not in STAGES]
    if unknown:
        raise DevenvError(f"unknown sanity stage(s): {', '.join(unknown)}", f"choose from: {', '.join(STAGES)}")
    started = time.monotonic()
    _check_python(conn, python)
    workdir = _make_workdir(conn)
    try:
        conn.put(script_bytes(), f"{workdir}/{SCRIPT_NAME}", 0o644)  # inside a 0700 folder
        command = (f"cd {quote(workdir)} && PYTHONUNBUFFERED=1 exec {quote(python)} {SCRIPT_NAME} "
                   f"--suite {suite} --json-lines" + (f" --inject {inject}" if inject else "")
                   + (f" --only {','.join(only)}" if only else ""))
        report, log_tail = _stream_events(conn, command, python, on_event, table,
                                          timeout if timeout is not None else TIMEOUTS[suite])
    finally:
        _remove_workdir(conn, workdir)
    verdict = judge_report(report, table)
    return SanityReport(host=conn.name, suite=suite, report=report, verdict=verdict,
                        wall_s=time.monotonic() - started, log_tail=log_tail)


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
                   table: SkuTable | None, timeout: float) -> tuple[dict, list[str]]:
    report: dict | None = None
    fatal: dict | None = None
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


def _fatal_error(host: str, python: str, fatal: dict) -> DevenvError:
    what = fatal.get("error")
    message = str(fatal.get("message") or what)
    if what == "no-torch":
        return DevenvError(f"PyTorch is not importable with '{python}' on {host}", PYTHON_HINT)
    if what == "no-cuda":
        return DevenvError(f"torch sees no CUDA GPU on {host}",
                           "check the driver with `devenv check`, and that this python's torch is a CUDA build")
    return DevenvError(f"the sanity program failed on {host}: {message}",
                       "run it again with DEVENV_DEBUG=1, and report it if it repeats")


def _parse(line: str) -> dict | None:
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
