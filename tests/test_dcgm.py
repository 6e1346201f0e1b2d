"""DCGM's diagnostics output read and judged (tests/fixtures/dcgm: composed to DCGM's own JSON schema, README)."""

from __future__ import annotations

import json
from pathlib import Path

from devenv.checks.report import FAIL, INFO, PASS, SKIP, WARN
from devenv.sanity.dcgm import diag_command, judge_diag, not_installed, parse_diag

FIX = Path(__file__).parent / "fixtures" / "dcgm"


def test_a_passing_run_gives_one_result_per_test_and_gpu():
    run = parse_diag((FIX / "r2-pass-composed.json").read_text(), 2)
    assert run.version == "4.2.3" and run.error is None
    assert [(r.category, r.test, r.gpu, r.status) for r in run.results] == [
        ("Deployment", "software", 0, PASS), ("Integration", "pcie", 0, PASS), ("Hardware", "memory", 0, PASS),
        ("Stress", "targeted_stress", 0, SKIP)]
    results = judge_diag(run)
    assert not [r for r in results if r.details.get("unhealthy")]
    assert results[3].value == "Stress/targeted_stress on GPU 0: Skip: Test skipped: not allowed on this SKU"


def test_a_hardware_failure_is_unhealthy_and_a_deployment_failure_a_warning():
    results = {r.id: r for r in judge_diag(parse_diag((FIX / "r2-memory-fail-composed.json").read_text(), 2))}
    memory, software = results["dcgm.memory"], results["dcgm.software"]
    assert memory.status == FAIL and memory.details["unhealthy"] and "Pending page retirements" in memory.value
    assert software.status == WARN and not software.details["unhealthy"] and "Persistence mode" in software.value


def test_text_before_the_document_is_skipped():
    text = "Warning: something dcgmi said first\n" + (FIX / "r2-pass-composed.json").read_text()
    assert len(parse_diag(text, 2).results) == 4


def test_no_host_engine_is_a_failure_that_says_how_to_start_it():
    (result,) = judge_diag(parse_diag((FIX / "no-hostengine-quoted.txt").read_text(), 1))
    assert result.status == FAIL and "Host engine connection invalid/disconnected" in result.value
    assert "nv-hostengine" in (result.remedy or "")


def test_a_runtime_error_beside_results_is_a_warning():
    data = json.loads((FIX / "r2-pass-composed.json").read_text())
    data["DCGM Diagnostic"]["runtime_error"] = "The plugin 'eud' could not be loaded"
    results = judge_diag(parse_diag(json.dumps(data), 2))
    assert results[-1].status == WARN and "eud" in results[-1].value


def test_the_command_and_the_words_without_dcgm():
    assert diag_command(2, [0, 3]) == "command -v dcgmi >/dev/null 2>&1 || exit 127; dcgmi diag -r 2 -i 0,3 -j 2>&1"
    result = not_installed(1, "box")
    assert result.status == INFO and result.details == {"installed": False}
