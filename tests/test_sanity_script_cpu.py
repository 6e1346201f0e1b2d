"""The real on-host program (devenv/sanity/scripts/sanity_run.py) run on this machine's CPU torch.

The same file runs on GPU hosts; here it takes its CPU smoke path (toy shapes, same code). What it proves
on a CPU is said plainly by the verdict: nothing about a GPU. The planted faults must end in a fail with
the reason: an inf written into a weight (non-finite loss), and fp16 autocast without a GradScaler on a
model whose gradients sit below fp16's smallest subnormal (CPU autocast has fp16, so this is real there).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from devenv.sanity import script_path
from devenv.sanity.verdict import FAIL, NO_GPU, judge_report

pytestmark = pytest.mark.usefixtures("local_torch")  # the program needs torch here; the laptop does not


def run_script(
    *args: str, timeout: float = 240, env: dict | None = None,
) -> tuple[list[dict], subprocess.CompletedProcess]:
    """One thread of torch: the toy shapes gain nothing from more, and on the 2-core CI machine, busy with the
    test host's part beside this one, OpenMP's second thread spin-waits for a core: 3-10 times the CPU time
    for the same steps (docs/benchmarks.md, "CI and test times"). What the program proves is the same."""
    done = subprocess.run([sys.executable, str(script_path()), "--json-lines", "--device", "cpu", *args],
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    events = [json.loads(line) for line in lines]  # every stdout line must be one JSON object
    assert all(isinstance(e, dict) and "event" in e for e in events)
    return events, done


def the_report(events: list[dict]) -> dict:
    assert events[0]["event"] == "start"
    assert events[-1]["event"] == "report", events[-1]
    assert [e for e in events if e["event"] == "report"] == [events[-1]]
    return events[-1]


def test_cpu_smoke_emits_json_lines_and_a_report_that_proves_no_gpu():
    events, done = run_script("--suite", "quick")
    assert done.returncode == 0, done.stderr[-2000:]
    report = the_report(events)
    progress = [e for e in events if e["event"] == "progress"]
    results = [e for e in events if e["event"] == "result"]
    assert progress and progress[-1]["i"] == progress[-1]["n"]
    checks = {r["check"] for r in results}
    assert {"fingerprint", "matmul_fp32", "matmul_bf16", "memcpy", "fp16_underflow_probe", "train_gpt_fp32",
            "train_gpt_fp16", "train_gpt_bf16", "train_resnet_fp32", "train_resnet_bf16"} <= checks
    assert [r["check"] for r in report["results"]] == [r["check"] for r in results if r["check"] != "fingerprint"]
    assert report["device"] == "cpu" and report["fingerprint"]["cpu_bf16_autocast"] is True
    assert not [r for r in report["results"] if r.get("error")]
    bf16 = next(r for r in report["results"] if r["check"] == "train_gpt_bf16")
    assert bf16["amp_dtype"] == "bfloat16" and bf16["loss_last"] < bf16["loss_first"]
    fp16 = next(r for r in report["results"] if r["check"] == "train_gpt_fp16")
    assert fp16["scaler"] is True and fp16["scaler_scale_final"] >= 1

    verdict = judge_report(report)
    assert verdict.status == NO_GPU, [(c.name, c.reason) for c in verdict.failures()]
    assert "nothing about a GPU was proven" in verdict.summary
    assert not verdict.gpu_proven


def test_injected_inf_ends_in_a_fail_with_the_reason():
    events, done = run_script("--suite", "quick", "--inject", "inf", "--only", "gpt")
    assert done.returncode == 0, done.stderr[-2000:]
    report = the_report(events)
    assert report["inject"] == "inf"
    verdict = judge_report(report)
    assert verdict.status == FAIL
    bad = [c for c in verdict.failures() if c.check == "train_gpt_bf16"]
    assert bad and "non-finite loss" in bad[0].reason and "injected" in bad[0].reason
    # only the poisoned run fails: the others ran clean beside it
    assert not [c for c in verdict.failures() if c.check != "train_gpt_bf16"]


def test_fp16_without_gradscaler_on_underflowing_gradients_fails_with_the_reason():
    events, done = run_script("--suite", "quick", "--inject", "fp16-no-scaler", "--only", "probe")
    assert done.returncode == 0, done.stderr[-2000:]
    report = the_report(events)
    probe = next(r for r in report["results"] if r["check"] == "fp16_underflow_probe")
    assert probe["scaler"] is False and probe["grad_zero_fraction"] == 1.0
    verdict = judge_report(report)
    assert verdict.status == FAIL
    reasons = " | ".join(c.reason for c in verdict.failures())
    assert "underflowed to zero" in reasons and "did not fall" in reasons


def test_ddp_stage_runs_under_torchrun_with_gloo_on_the_cpu():
    events, done = run_script("--suite", "full", "--only", "ddp", "--ddp-nproc", "2", timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    report = the_report(events)
    ar = next(r for r in report["results"] if r["check"] == "allreduce")
    assert ar["correct"] is True and ar["world_size"] == 2 and ar["backend"] == "gloo"
    ddp = next(r for r in report["results"] if r["check"] == "train_gpt_ddp_bf16")
    assert ddp["ranks_in_sync"] is True and ddp["loss_last"] < ddp["loss_first"]
    verdict = judge_report(report)
    assert not verdict.failures(), [(c.name, c.reason) for c in verdict.failures()]


def test_missing_torch_is_one_fatal_line(tmp_path):
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('no torch in this environment')\n")
    events, done = run_script("--suite", "quick", env={"PYTHONPATH": str(tmp_path)})
    assert done.returncode == 3
    assert [e["event"] for e in events] == ["start", "fatal"]
    assert events[-1]["error"] == "no-torch" and "no torch in this environment" in events[-1]["message"]
