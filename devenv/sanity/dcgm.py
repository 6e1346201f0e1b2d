"""DCGM diagnostics (`dcgmi diag -r N -j`) read and judged (L0: pure, fed its JSON).

DCGM 3.x/4.x print one JSON document: {"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests":
[{"name": "memory", "results": [{"entity_group": "GPU", "entity_id": 0, "status": "Pass", "warnings": [{"warning":
"...", "error_id": N, ...}], "info": [...]}], "test_summary": {"status": "Pass"}}]}], "runtime_error": "..."},
"entity_groups": [...], "metadata": {"version": "4.x", "Driver Version Detected": "..."}} (the schema is NVIDIA/DCGM's
testing/python3/dcgm_diag_schema.json). A failed test in a hardware category (memory, PCIe, stress, ...) is a
sick GPU: UNHEALTHY, as check's health findings. A failed Deployment test is the host's setup (persistence mode,
permissions, a blocked library): a warning with DCGM's own words.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from devenv.checks.report import FAIL, INFO, PASS, SKIP, WARN, CheckResult, Status

LEVELS = (1, 2, 3)
# dcgmi's run times by level (DCGM user guide: r1 seconds, r2 about two minutes, r3 about half an hour), with room
TIMEOUTS = {1: 300.0, 2: 900.0, 3: 3600.0}
SOURCE = "DCGM diagnostics (`dcgmi diag -r {level} -j`): NVIDIA's own tests and thresholds"
CONFIG_CATEGORIES = {"deployment"}
_STATUS = {"pass": PASS, "fail": FAIL, "warn": WARN, "warning": WARN, "skip": SKIP, "not run": SKIP}


def diag_command(level: int, gpus: list[int] | None = None) -> str:
    """The probe: exit 127 without dcgmi; dcgmi's own exit code (non-zero when a test failed) otherwise."""
    only = f" -i {','.join(str(g) for g in gpus)}" if gpus else ""
    return f"command -v dcgmi >/dev/null 2>&1 || exit 127; dcgmi diag -r {int(level)}{only} -j 2>&1"


@dataclass(frozen=True)
class DcgmResult:
    category: str
    test: str
    status: Status
    gpu: int | None
    messages: tuple[str, ...] = ()
    word: str = ""            # DCGM's own status word (Pass, Fail, Warn, Skip, Not Run)


@dataclass
class DcgmRun:
    level: int
    results: list[DcgmResult] = field(default_factory=list)
    version: str | None = None
    error: str | None = None     # DCGM's runtime error, or why its output could not be read


def parse_diag(text: str, level: int) -> DcgmRun:
    """dcgmi's JSON (text before the document, as dcgmi prints warnings first, is skipped)."""
    start = text.find("{")
    try:
        data = json.loads(text[start:]) if start >= 0 else None
    except json.JSONDecodeError:
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("DCGM Diagnostic"), dict):
        lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
        return DcgmRun(level, error=lines[-1] if lines else "dcgmi printed nothing")
    diag = data["DCGM Diagnostic"]
    run = DcgmRun(level, version=(data.get("metadata") or {}).get("version"),
                  error=diag.get("runtime_error") or None)
    for category in diag.get("test_categories") or []:
        for test in category.get("tests") or []:
            results = test.get("results") or [{"status": (test.get("test_summary") or {}).get("status", "")}]
            for r in results:
                words = [str(w.get("warning", "")).strip() for w in r.get("warnings") or [] if isinstance(w, dict)]
                words += [str(i).strip() for i in r.get("info") or [] if isinstance(i, str)]
                gpu = r.get("entity_id") if r.get("entity_group", "GPU") == "GPU" else None
                run.results.append(DcgmResult(str(category.get("category", "?")), str(test.get("name", "?")),
                                              _STATUS.get(str(r.get("status", "")).lower(), INFO),
                                              gpu if isinstance(gpu, int) else None, tuple(w for w in words if w),
                                              str(r.get("status", "?"))))
    return run


def judge_diag(run: DcgmRun) -> list[CheckResult]:
    """One result per test and GPU, in the shape of check's health findings (details["unhealthy"])."""
    source = SOURCE.format(level=run.level)
    if run.error and not run.results:
        return [CheckResult("dcgm", f"DCGM diag -r {run.level}", FAIL, f"did not run: {run.error}",
                            "start DCGM's host engine (`sudo systemctl start nvidia-dcgm` or `sudo nv-hostengine`), "
                            "then run `dcgmi diag -r 1` on the host to see it work", {"source": source})]
    out = []
    for r in run.results:
        where = f"GPU {r.gpu}" if r.gpu is not None else "host"
        config = r.category.lower() in CONFIG_CATEGORIES
        status = WARN if r.status == FAIL and config else r.status
        said = "; ".join(r.messages[:2])
        value = f"{r.category}/{r.test} on {where}: {r.word}" + (f": {said}" if said else "")
        remedy = None
        if status == FAIL:
            remedy = ("DCGM found a hardware fault: keep work off this GPU; `dcgmi diag -r 3` for detail, then reset "
                      "it (`sudo nvidia-smi -r -i N`) or ask for an RMA")
        elif status == WARN:
            remedy = "DCGM's words say what to change on the host" if config else "watch it: rerun with -r 2"
        out.append(CheckResult(f"dcgm.{r.test}", f"DCGM {r.test}" + (f" (GPU {r.gpu})" if r.gpu is not None else ""),
                               status, value, remedy,
                               {"source": source, "unhealthy": status == FAIL, "category": r.category,
                                "test": r.test, "gpu_index": r.gpu, "dcgm_version": run.version}))
    if run.error:
        out.append(CheckResult("dcgm", f"DCGM diag -r {run.level}", WARN, f"runtime error: {run.error}",
                               "run `dcgmi diag -r 1` on the host to see it", {"source": source}))
    return out


def not_installed(level: int, host: str) -> CheckResult:
    """What a host without DCGM gets: said, with what devenv ran instead."""
    return CheckResult("dcgm", f"DCGM diag -r {level}", INFO,
                       f"DCGM is not installed on {host} (no dcgmi): devenv ran its own checks instead: the health "
                       "section (ECC, row remapping, Xid, clocks, PCIe link under load from nvidia-smi -q and the "
                       "kernel log) and the sanity suite (matmul rates and results, memory bandwidth, training)",
                       "for NVIDIA's own diagnostics install DCGM (the datacenter-gpu-manager package) and start "
                       "its host engine", {"installed": False})
