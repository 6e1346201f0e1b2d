"""The sanity runner service over a real LocalConnection (this machine, bash, the real program on CPU torch),
and the report history. The SSH path is the same code with SSHConnection; it runs for real on the H200."""

from __future__ import annotations

import copy
import json
import os
import stat
import sys
from pathlib import Path

import pytest

from devenv.errors import DevenvError
from devenv.remote.local import LocalConnection
from devenv.sanity.verdict import FAIL, NO_GPU, Check, judge_report
from devenv.services import sanity_history as history
from devenv.services.sanity import run_sanity

FIXTURES = Path(__file__).parent / "fixtures" / "sanity"
needs_torch = pytest.mark.usefixtures("local_torch")  # the real program on this machine's torch (marked torch)


class RecordingConnection(LocalConnection):
    """The real local connection, noting the commands it ran (to find the temporary folder afterwards)."""

    def __init__(self):
        super().__init__("local")
        self.commands: list[str] = []
        self.outputs: list[str] = []

    def run(self, command, **kw):
        result = super().run(command, **kw)
        self.commands.append(command)
        self.outputs.append(result.stdout)
        return result


@needs_torch
def test_run_sanity_ships_the_program_streams_events_and_cleans_up():
    conn = RecordingConnection()
    events: list[dict] = []
    sr = run_sanity(conn, python=sys.executable, suite="quick", on_event=events.append, only=("probe", "matmul"))
    kinds = [e["event"] for e in events]
    assert kinds[0] == "start" and "progress" in kinds and "result" in kinds
    assert "report" not in kinds  # the report is the return value, not an event
    results = [e for e in events if e["event"] == "result"]
    assert results[0]["check"] == "fingerprint"
    probe = next(e for e in results if e["check"] == "fp16_underflow_probe")
    assert probe["checks"] and all(isinstance(c, Check) for c in probe["checks"])  # judged live
    assert sr.verdict.status == NO_GPU and sr.suite == "quick" and sr.host == "local"
    assert {r["check"] for r in sr.report["results"]} == {"matmul_fp32", "matmul_bf16", "fp16_underflow_probe"}
    workdir = next(out.strip() for cmd, out in zip(conn.commands, conn.outputs) if cmd.startswith("mktemp"))
    assert workdir.startswith("/tmp/devenv-sanity-") and not os.path.exists(workdir)


@needs_torch
def test_injected_fault_through_the_service_is_a_failed_verdict():
    sr = run_sanity(LocalConnection("local"), python=sys.executable, inject="fp16-no-scaler", only=("probe",))
    assert sr.verdict.status == FAIL
    assert any("underflowed" in c.reason for c in sr.verdict.failures())


def test_missing_python_is_a_clear_error_with_a_hint():
    with pytest.raises(DevenvError) as err:
        run_sanity(LocalConnection("local"), python="/nonexistent/bin/python3")
    assert "not found" in err.value.message and "python:" in err.value.hint


def test_python_without_torch_is_a_clear_error(tmp_path):
    fake = tmp_path / "site" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('No module named torch')\n")
    wrapper = tmp_path / "python3"
    wrapper.write_text(f"#!/bin/sh\nPYTHONPATH={tmp_path / 'site'} exec {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    with pytest.raises(DevenvError) as err:
        run_sanity(LocalConnection("local"), python=str(wrapper))
    assert "PyTorch is not importable" in err.value.message and "/opt/torch/.venv/bin/python3" in err.value.hint


def test_unknown_suite_stage_or_fault_is_refused_before_anything_runs():
    for kwargs in ({"suite": "huge"}, {"inject": "bitflip"}, {"only": ("gpu-burn",)}):
        with pytest.raises(DevenvError):
            run_sanity(LocalConnection("local"), python=sys.executable, **kwargs)


# ------------------------------------------------------------------ history
def recorded_report(name="h200-quick.jsonl") -> dict:
    return json.loads((FIXTURES / name).read_text().splitlines()[-1])


def test_saved_reports_are_private_and_come_back_newest_last(isolated_home):
    rep = recorded_report()
    verdict = judge_report(rep)
    first = history.save_report("gpu/host", rep, verdict)
    second = history.save_report("gpu/host", rep, verdict)  # same second: both kept
    assert first != second
    assert first.parent == isolated_home / "state" / "sanity" / "gpu_host"
    assert stat.S_IMODE(first.stat().st_mode) == 0o600
    assert stat.S_IMODE(first.parent.stat().st_mode) == 0o700
    assert history.list_reports("gpu/host") == sorted([first, second])
    record = history.last_report("gpu/host")
    assert record["report"] == rep and record["verdict"]["status"] == verdict.status
    # the one saved before the second is the first (the two may fall in different seconds on a loaded machine)
    assert history.last_report("gpu/host", before=second) == history.load_report(first)
    assert history.last_report("other") is None


def test_compare_flags_what_got_worse_and_what_changed_underneath():
    before = {"host": "a", "suite": "quick", "report": recorded_report()}
    after = {"host": "a", "suite": "quick", "report": copy.deepcopy(before["report"])}
    for r in after["report"]["results"]:
        if r.get("check") == "matmul_bf16":
            r["tflops"] = r["tflops"] * 0.6
        if r.get("check") == "train_gpt_bf16":
            r["throughput"] *= 1.02
    after["report"]["fingerprint"]["torch"] = "2.12.0+cu130"
    cmp = history.compare(before, after)
    rows = {r.metric: r for r in cmp.rows}
    assert rows["matmul bf16"].change == "worse" and abs(rows["matmul bf16"].ratio - 0.6) < 1e-9
    gpt = next(r for name, r in rows.items() if name.startswith("gpt bf16 [") and name.endswith("throughput"))
    assert gpt.change == "same"
    assert [r.metric for r in cmp.worse()] == ["matmul bf16"]
    assert any(n.startswith("torch: 2.11.0+cu130 -> 2.12.0+cu130") for n in cmp.notes)
    assert "AMP speedup" in " ".join(rows)


def test_compare_across_hosts_lists_metrics_only_one_side_has():
    quick = {"host": "a", "suite": "quick", "report": recorded_report("h200-quick.jsonl")}
    full = {"host": "b", "suite": "full", "report": recorded_report("h200-full.jsonl")}
    cmp = history.compare(quick, full)
    new = [r for r in cmp.rows if r.change == "new"]
    assert any("compile" in r.metric for r in new)
    assert any("suite: quick -> full" in n for n in cmp.notes)
