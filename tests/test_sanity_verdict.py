"""The sanity verdict (L0) over reports shaped exactly as sanity_run.py writes them.

Numbers: the H200 reports are real (tests/fixtures/sanity/*.jsonl, recorded on the project's H200 with
torch 2.11.0+cu130); the synthetic ones reuse amp-reference.md's H200 numbers and change one thing each.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from devenv.sanity.verdict import (
    FAIL,
    INFO,
    NO_GPU,
    PASS,
    WARN,
    judge_report,
    load_sku_table,
)

FIXTURES = Path(__file__).parent / "fixtures" / "sanity"


def recorded(name: str) -> dict:
    events = [json.loads(line) for line in (FIXTURES / name).read_text().splitlines() if line.strip()]
    assert events[0]["event"] == "start" and events[-1]["event"] == "report"
    return events[-1]


# ------------------------------------------------------------------ synthetic reports (script's shapes)
def fingerprint(name="NVIDIA H200", cap="9.0", device="cuda", mem=150109880320):
    fp = {"check": "fingerprint", "kind": "fingerprint", "device": device, "torch": "2.11.0+cu130",
          "torch_cuda": "13.0", "cudnn": 91900, "driver": "580.159.04", "python": "3.12.3",
          "tf32": {"matmul_tf32": False, "cudnn_tf32": True}}
    if device == "cuda":
        fp.update(gpu_count=1, gpu_name=name, capability=cap, bf16_supported=True,
                  gpus=[{"index": 0, "name": name, "memory_bytes": mem, "capability": cap}])
    else:
        fp.update(gpu_count=0, gpus=[], cpu_bf16_autocast=True)
    return fp


def matmul(dtype, tflops, n=8192, rel_err=None, mismatches=0, gpu=0):
    err = {"fp32": 1.6e-6, "tf32": 2.9e-4, "fp16": 2.1e-4, "bf16": 1.7e-3}[dtype] if rel_err is None else rel_err
    return {"check": f"matmul_{dtype}", "kind": "matmul", "dtype": dtype, "n": n, "gpu": gpu, "tflops": tflops,
            "rel_err_vs_fp64": err, "repeat_runs": 3, "repeat_mismatches": mismatches, "finite": True}


def memcpy(gbps, nbytes=2147483648, correct=True):
    return {"check": "memcpy", "kind": "bandwidth", "bytes": nbytes, "gpu": 0, "gbps": gbps, "correct": correct}


def train(model, mode, throughput, step_ms, mem_gib, *, losses=(10.9, 8.0, 6.0, 4.2), scaler=None, steps=15,
          warmup=3, skipped_after_warmup=0, scale_final=65536.0, workload=None, compiled=False, tflops=None):
    unit = "tok/s" if model == "gpt" else "img/s"
    workload = workload or ("gpt2-small/b16/t1024" if model == "gpt" else "resnet50/b256/224/channels_last")
    amp = {"fp16": "float16", "bf16": "bfloat16"}.get(mode)
    scaler = (mode == "fp16") if scaler is None else scaler
    values = list(losses)
    bad = [i for i, v in enumerate(values) if isinstance(v, str)]
    r = {"check": f"train_{model}_{mode}" + ("_compile" if compiled else ""), "kind": "train", "model": model,
         "workload": workload, "mode": mode, "amp_dtype": amp, "scaler": scaler, "compiled": compiled, "gpu": 0,
         "steps": steps, "warmup": warmup, "step_ms": step_ms, "throughput": throughput, "throughput_unit": unit,
         "losses": values, "loss_first": values[0], "loss_last": values[-1], "nonfinite_losses": len(bad),
         "first_nonfinite_step": bad[0] if bad else None, "params_finite": not bad,
         "peak_mem_bytes": int(mem_gib * 2**30), "skipped_after_warmup": skipped_after_warmup}
    if scaler:
        r.update(scaler_scale_init=65536.0, scaler_scale_final=scale_final)
    if tflops is not None:
        r["model_tflops"] = tflops
    return r


def probe(zero_fraction=0.0003, scaler=True, losses=(2.32, 2.1, 1.75)):
    return {"check": "fp16_underflow_probe", "kind": "probe", "scaler": scaler, "gpu": 0, "losses": list(losses),
            "loss_first": losses[0], "loss_last": losses[-1], "grad_zero_fraction": zero_fraction,
            "nonfinite_losses": 0}


def h200_results():
    """amp-reference.md's H200 numbers: GPT 54.9k / 164k / 372k / 380k tok/s, ResNet 971 / 3155 / 6042 / 4666."""
    tokens = 16 * 1024
    gpt = [("fp32", 54900, 19.8), ("tf32", 164000, 19.8), ("fp16", 372000, 14.5), ("bf16", 380000, 14.5)]
    cnn = [("fp32", 971, 21.5), ("tf32", 3155, 21.5), ("fp16", 6042, 11.1), ("bf16", 4666, 11.1)]
    return [matmul("fp32", 51.3), matmul("tf32", 393), matmul("fp16", 771), matmul("bf16", 777), memcpy(4270),
            probe()] + \
        [train("gpt", m, t, tokens / t * 1e3, g, tflops=t * 857e6 / 1e12) for m, t, g in gpt] + \
        [train("resnet", m, t, 256 / t * 1e3, g, losses=(7.1, 2.0, 0.05)) for m, t, g in cnn]


def report(results, fp=None, **extra):
    fp = fp or fingerprint()
    return {"event": "report", "schema": 1, "suite": "quick", "device": fp["device"], "inject": None,
            "fingerprint": fp, "results": [fp] + results, **extra}


def by_name(verdict, name):
    found = [c for c in verdict.checks if c.name == name]
    assert found, f"no check named {name!r}; have {[c.name for c in verdict.checks]}"
    return found[0]


# ------------------------------------------------------------------ the real H200 runs
def test_recorded_h200_quick_run_passes_with_its_targets():
    v = judge_report(recorded("h200-quick.jsonl"))
    assert v.sku == "h200" and v.gpu_proven
    assert v.status == PASS, [c for c in v.checks if c.status in (FAIL, WARN)]
    bf16 = by_name(v, "matmul bf16: rate")
    assert bf16.measured >= 700  # issue 4 target: bf16 GEMM >= 700 TFLOP/s
    assert bf16.threshold == ">= 583" and "DCGM" in bf16.source and "amp-reference" in bf16.source
    for amp in ("fp16", "bf16"):
        assert by_name(v, f"GPT {amp} AMP: speedup vs fp32").measured >= 5.0
        assert by_name(v, f"GPT {amp} AMP: speedup vs tf32").measured >= 1.8


def test_recorded_h200_full_run_meets_the_compile_mfu_target():
    v = judge_report(recorded("h200-full.jsonl"))
    mfu = by_name(v, "GPT bf16 + compile: MFU")
    assert mfu.status == PASS and mfu.measured >= 0.40 and mfu.threshold == ">= 0.4"
    assert v.status == PASS
    one_gpu = [c for c in v.checks if c.check == "allreduce"]
    assert one_gpu and all(c.status == "skip" for c in one_gpu)


def test_recorded_run_with_a_slow_matmul_fails_on_the_dcgm_rule():
    rep = copy.deepcopy(recorded("h200-quick.jsonl"))
    slow = next(r for r in rep["results"] if r.get("check") == "matmul_bf16")
    slow["tflops"] = 500.0  # < 0.75 x 777
    v = judge_report(rep)
    check = by_name(v, "matmul bf16: rate")
    assert v.status == FAIL and check.status == FAIL and check.measured == 500.0
    assert "matmul bf16: rate" in v.summary


# ------------------------------------------------------------------ synthetic: healthy, slow, unknown, CPU
def test_healthy_h200_report_passes_every_judged_check():
    v = judge_report(report(h200_results()))
    assert v.status == PASS, [(c.name, c.reason) for c in v.checks if c.status != PASS and c.status != INFO]
    assert by_name(v, "GPT bf16 AMP: peak memory vs fp32").status == PASS  # 14.5 / 19.8 = 0.73
    assert by_name(v, "GPT bf16: throughput").threshold == ">= 285,000"  # 0.75 x 380k


def test_slow_gpu_fails_rates_and_names_the_threshold_source():
    results = h200_results()
    for r in results:
        if r["kind"] == "matmul":
            r["tflops"] *= 0.5
        if r["kind"] == "bandwidth":
            r["gbps"] = 2000.0
        if r["kind"] == "train" and r["model"] == "gpt" and r["mode"] == "bf16":
            r["throughput"], r["step_ms"] = 200000.0, 16384 / 200000 * 1e3
    v = judge_report(report(results))
    assert v.status == FAIL
    for name in ("matmul bf16: rate", "matmul fp16: rate", "device copy: rate", "GPT bf16: throughput"):
        c = by_name(v, name)
        assert c.status == FAIL and c.threshold.startswith(">=") and "0.75 x known-good" in c.source
    assert by_name(v, "matmul bf16: accuracy").status == PASS  # slow is not wrong


def test_known_gpu_without_known_good_warns_below_half_the_datasheet_never_fails():
    fp = fingerprint("NVIDIA A100-SXM4-80GB", "8.0")
    v = judge_report(report([matmul("bf16", 100.0), matmul("fp16", 280.0), memcpy(1700.0)], fp=fp))
    assert v.sku == "a100-sxm4-80gb"
    low = by_name(v, "matmul bf16: rate")
    assert low.status == WARN and low.threshold == ">= 156" and "datasheet" in low.source
    assert by_name(v, "matmul fp16: rate").status == PASS
    assert by_name(v, "device copy: rate").status == PASS
    assert v.status == WARN


def test_unknown_gpu_reports_rates_but_never_judges_them():
    fp = fingerprint("NVIDIA Imaginary X900", "10.0")
    results = h200_results()
    for r in results:
        if r["kind"] == "matmul":
            r["tflops"] = 1.0  # absurdly low: still not judged, there is nothing to judge it against
    v = judge_report(report(results, fp=fp))
    assert v.sku is None and "unknown GPU" in v.summary
    rates = [c for c in v.checks if c.name.endswith(": rate") or c.name.endswith(": throughput")]
    assert rates and all(c.status == INFO and c.threshold is None for c in rates)
    assert all(c.status == INFO for c in v.checks if "MFU" in c.name)
    assert by_name(v, "matmul bf16: accuracy").status == PASS  # correctness is judged on any GPU
    assert v.status == PASS


def test_cpu_only_report_says_nothing_about_a_gpu_was_proven():
    fp = fingerprint(device="cpu")
    results = [matmul("fp32", 0.2), probe(),
               train("gpt", "fp32", 30000, 17, 0, losses=(6.2, 4.0, 3.1)),
               train("gpt", "bf16", 20000, 25, 0, losses=(6.2, 4.0, 3.1))]
    for r in results:
        r["gpu"] = None
        r.pop("peak_mem_bytes", None)
    v = judge_report(report(results, fp=fp))
    assert v.status == NO_GPU and not v.gpu_proven
    assert "no GPU: nothing about a GPU was proven" in v.summary
    speed = by_name(v, "GPT bf16 AMP: speedup vs fp32")
    assert speed.status == INFO  # bf16 slower than fp32 on a CPU is no failure of anything


# ------------------------------------------------------------------ the failure modes
def test_non_finite_loss_fails_with_the_step():
    results = h200_results()
    bad = train("gpt", "bf16", 380000, 43.1, 14.5, losses=(10.9, 9.0, "nan", "nan"))
    results = [r for r in results if r["check"] != "train_gpt_bf16"] + [bad]
    v = judge_report(report(results))
    c = by_name(v, "GPT bf16: finite")
    assert v.status == FAIL and c.status == FAIL and "first at step 2" in c.reason
    assert by_name(v, "GPT bf16: loss falls").status == "skip"
    assert not [x for x in v.checks if x.name == "GPT bf16 AMP: loss tracks fp32"]


def test_gradscaler_scale_collapse_and_frequent_skips_fail():
    results = [r for r in h200_results() if r["check"] != "train_gpt_fp16"]
    results.append(train("gpt", "fp16", 372000, 44.0, 14.5, skipped_after_warmup=12, scale_final=2.0**-1,
                         losses=(10.9, 10.9, 10.9, 10.9)))
    v = judge_report(report(results))
    assert by_name(v, "GPT fp16: GradScaler scale").status == FAIL
    skips = by_name(v, "GPT fp16: skipped steps")
    assert skips.status == FAIL and skips.measured == 12
    assert by_name(v, "GPT fp16: loss falls").status == FAIL


def test_a_few_calibration_skips_pass_and_a_third_warns():
    ok = judge_report(report([train("gpt", "fp16", 372000, 44.0, 14.5, skipped_after_warmup=2)]))
    assert by_name(ok, "GPT fp16: skipped steps").status == PASS  # 2 of 12: GradScaler calibrating
    some = judge_report(report([train("gpt", "fp16", 372000, 44.0, 14.5, skipped_after_warmup=4)]))
    assert by_name(some, "GPT fp16: skipped steps").status == WARN


def test_loss_not_falling_on_a_memorisable_batch_fails():
    v = judge_report(report([train("resnet", "bf16", 4666, 54.9, 11.1, losses=(7.1, 7.0, 6.9))]))
    c = by_name(v, "ResNet bf16: loss falls")
    assert c.status == FAIL and "did not fall" in c.reason


def test_no_amp_speedup_fails_and_slow_amp_misses_the_h200_target():
    a100 = fingerprint("NVIDIA A100-SXM4-80GB", "8.0")
    results = [train("gpt", "fp32", 20000, 819, 19.8), train("gpt", "tf32", 60000, 273, 19.8),
               train("gpt", "bf16", 19000, 862, 19.9)]
    v = judge_report(report(results, fp=a100))
    c = by_name(v, "GPT bf16 AMP: speedup vs fp32")
    assert c.status == FAIL and c.threshold == ">= 1" and "no AMP speedup" in c.source
    assert by_name(v, "GPT bf16 AMP: speedup vs tf32").status == WARN
    assert by_name(v, "GPT bf16 AMP: peak memory vs fp32").status == WARN
    h200 = [train("gpt", "fp32", 54900, 298, 19.8), train("gpt", "tf32", 164000, 100, 19.8),
            train("gpt", "bf16", 200000, 81.9, 14.5)]
    v = judge_report(report(h200))
    c = by_name(v, "GPT bf16 AMP: speedup vs fp32")
    assert c.status == FAIL and c.threshold == ">= 5" and "issue 4" in c.source


def test_wrong_or_unrepeatable_matmul_fails():
    v = judge_report(report([matmul("bf16", 777, rel_err=0.3), matmul("fp16", 771, mismatches=17)]))
    assert by_name(v, "matmul bf16: accuracy").status == FAIL
    rep = by_name(v, "matmul fp16: repeatable")
    assert rep.status == FAIL and rep.measured == 17 and "gpu-burn" in rep.source


def test_fp16_underflow_without_scaler_fails_and_with_scaler_passes():
    bad = judge_report(report([probe(zero_fraction=1.0, scaler=False, losses=(2.32, 2.32, 2.32))]))
    c = by_name(bad, "fp16 underflow probe: gradients survive (WITHOUT GradScaler)")
    assert c.status == FAIL and "underflowed to zero" in c.reason
    good = judge_report(report([probe()]))
    assert by_name(good, "fp16 underflow probe: gradients survive (with GradScaler)").status == PASS


def test_check_that_raised_is_a_failure_with_its_error():
    err = {"check": "train_resnet_fp32", "kind": "train", "error": "OutOfMemoryError: CUDA out of memory."}
    v = judge_report(report([err]))
    assert v.status == FAIL and "out of memory" in by_name(v, "train_resnet_fp32: ran").reason


def test_allreduce_wrong_sum_fails_and_bandwidth_is_reported():
    ar = {"check": "allreduce", "kind": "allreduce", "backend": "nccl", "world_size": 8, "bytes": 268435456,
          "busbw_gbs": 360.0, "correct": False, "max_abs_err": 3.0}
    v = judge_report(report([ar]))
    assert by_name(v, "all-reduce: correct").status == FAIL
    bw = by_name(v, "all-reduce: bus bandwidth")
    assert bw.status == INFO and bw.measured == 360.0


def test_compile_mfu_below_target_fails_on_h200():
    r = train("gpt", "bf16", 330000, 49.6, 8.5, compiled=True, tflops=283.0)
    v = judge_report(report([r]))
    c = by_name(v, "GPT bf16 + compile: MFU")
    assert c.status == FAIL and abs(c.measured - 283.0 / 989.5) < 1e-3


# ------------------------------------------------------------------ the table itself
def test_sku_table_names_real_gpus_and_cites_every_number():
    table = load_sku_table()
    names = {"NVIDIA H200": "h200", "NVIDIA H200 NVL": "h200-nvl", "NVIDIA H100 80GB HBM3": "h100-sxm",
             "NVIDIA H100 PCIe": "h100-pcie", "NVIDIA A100-SXM4-40GB": "a100-40gb", "NVIDIA L4": "l4",
             "NVIDIA L40S": "l40s", "NVIDIA GeForce RTX 4090": "rtx-4090", "NVIDIA GeForce RTX 5090": "rtx-5090",
             "Tesla T4": "t4", "Tesla V100-SXM2-32GB": "v100-sxm2", "NVIDIA A10G": None}
    for name, sku in names.items():
        got = table.match(name)
        assert (got.id if got else None) == sku, name
    for sku in table.skus:
        assert sku.datasheet.get("source"), sku.id
        assert sku.peak("mem_bw_gbs"), sku.id
        for dtype in ("fp16", "bf16", "tf32"):
            dense = sku.peak(dtype)
            assert dense is None or dense <= 1000, f"{sku.id} {dtype}: a sparse figure slipped in"
        for key, entry in sku.known_good.items():
            entries = entry.values() if key == "train" else [entry]
            for e in entries:
                assert str(e.get("source", "")).strip(), f"{sku.id} known_good {key} has no source"
    frac, src = table.rule("known_good_fraction")
    assert frac == 0.75 and "DCGM" in src
