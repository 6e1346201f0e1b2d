"""Judge a sanity report: pass / warn / fail per check, each with measured value, threshold and its source.

L0: standard library + pyyaml. The on-host script only measures; every expectation lives here and in
data/gpu_skus.yaml, so a GPU that matches no entry gets its numbers reported and no verdict on its rates.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from devenv.checks.report import FAIL, INFO, NO_GPU, PASS, SKIP, WARN, CheckResult, Status

# The bundled tables (ours, plain YAML) through libyaml's safe loader where PyYAML has it: ~8x less CPU than the
# pure-Python SafeLoader, the same data (tests/test_profiles.py compares the two on every bundled table).
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

Json = dict[str, Any]  # a report, result or table entry as the on-host script (or the YAML) wrote it

SKU_TABLE_PATH = Path(__file__).parent / "data" / "gpu_skus.yaml"
NOT_JUDGED = Status.NOT_JUDGED  # a speed measured on a GPU another process was using: shown, never judged
BUSY = Status.BUSY  # the verdict when speed went unjudged because a target GPU was shared
UNHEALTHY = Status.UNHEALTHY  # the verdict when a target GPU is sick (checks.health): speed not judged
HEALTH_IDS = ("gpu.", "dcgm")  # the ids of health findings and DCGM's results among a verdict's checks
HEALTH_SOURCE = "`nvidia-smi -q` and the kernel log's Xid lines, read from the host before the run (docs/health.md)"
IDLE_SOURCE = ("devenv rule: a process that holds memory but had no SM time in any sample of the run (nvidia-smi "
               "pmon) takes nothing from the run's speed; the workloads are sized by the memory free at the start")
_RANK = {FAIL: 3, WARN: 2, PASS: 1, INFO: 0, SKIP: 0, NOT_JUDGED: 0}
SHARED_SOURCE = ("DCGM diagnostics refuse to judge a GPU that other processes use: their numbers measure the "
                 "sharing, not the GPU")

# Relative error of a product against float64 on the same rounded inputs: a few times the unit roundoff
# of what the tensor cores round to (fp32 2^-24; tf32 inputs 2^-11; fp16 output 2^-11; bf16 output 2^-9).
ACCURACY = {
    "fp32": (1e-5, "fp32 unit roundoff 2^-24 = 6e-8; a K=8192 sum stays far under 1e-5"),
    "tf32": (5e-3, "tf32 keeps 10 mantissa bits (unit roundoff 2^-11 = 4.9e-4); typical error ~3e-4"),
    "fp16": (5e-3, "fp16 output rounding, unit roundoff 2^-11 = 4.9e-4"),
    "bf16": (2e-2, "bf16 output rounding, unit roundoff 2^-9 = 2e-3"),
}
GPU_BURN_SOURCE = "gpu-burn: the same GEMM repeated must give the same result (elements compared at 1e-3)"
LOSS_FALL_RATIO = 0.8
LOSS_FALL_SOURCE = ("devenv rule: a memorisable batch (few distinct targets) must be learned, so the loss "
                    "must fall; amp-reference.md failure mode 'loss not falling on a memorisable batch'")
FINITE_SOURCE = "amp-reference.md failure mode 'non-finite loss'"
SCALER_SOURCE = ("PyTorch GradScaler defaults (init 2^16, backoff 0.5): 16 consecutive skips reach 1; "
                 "a scale below 1 is broken (amp-reference.md)")
SKIP_WARN, SKIP_FAIL = 0.25, 0.5
SKIP_SOURCE = ("amp-reference.md failure mode 'frequent skipped steps after warm-up'; devenv thresholds for a "
               "short run, where GradScaler's first calibration skips are normal: warn above 25%, fail from 50% "
               "of the timed steps")
AMP_GENERIC_SOURCE = ("amp-reference.md: 'no AMP speedup' is a failure mode; published TF32->AMP speedups "
                      "are 1.44x-2.63x (A100) and FP32->AMP 3.26x-4.48x (V100)")
AMP_LOSS_SOURCE = ("devenv rule: AMP must track the fp32 loss curve; the last losses may differ by 10% of the "
                   "starting loss (NVIDIA DeepLearningExamples report unchanged accuracy with AMP, e.g. ResNet-50 "
                   "77.12 vs 76.95)")
AMP_LOSS_TOL = 0.10
UNDERFLOW_SOURCE = ("fp16's smallest subnormal is 6e-8: smaller gradients flush to zero without loss scaling "
                    "(PyTorch AMP docs, GradScaler)")
ALLREDUCE_SOURCE = "nccl-tests -c: an all-reduce of exact integers must equal the sum computed locally"
DDP_SYNC_SOURCE = "DistributedDataParallel keeps every rank's weights identical after each step"


@dataclass(frozen=True)
class Check:
    name: str  # what was judged, for people: "matmul bf16: rate"
    status: Status  # pass | warn | fail | info | skip
    measured: Any = None
    unit: str = ""
    threshold: str | None = None  # e.g. ">= 582.8" (already the number compared against)
    source: str | None = None  # where the threshold comes from
    reason: str = ""  # one line, why this status
    check: str | None = None  # the script's result id (matmul_bf16, train_gpt_fp16, ...)
    gpu: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.status, Status):  # a plain word (a saved report, the script's events)
            object.__setattr__(self, "status", Status(self.status))

    def as_result(self) -> CheckResult:
        """For the one renderer: the measured value, the bound it missed, and why."""
        value = "" if self.measured is None else f"{fmt(self.measured)} {self.unit}".strip()
        bound = f" (needs {self.threshold})" if self.threshold and self.status in (WARN, FAIL) else ""
        why = f"  - {self.reason}" if self.status in (WARN, FAIL, SKIP, NOT_JUDGED) or self.measured is None else ""
        return CheckResult(self.check or self.name, self.name, self.status, f"{value}{bound}{why}", None,
                           {"source": self.source, "gpu": self.gpu})

    def to_dict(self) -> Json:
        return asdict(self)


@dataclass(frozen=True)
class Verdict:
    status: Status  # pass | warn | fail | busy | no-gpu
    summary: str
    gpu_proven: bool
    sku: str | None  # the matched SKU id, None for an unknown GPU or none
    gpu_name: str | None
    checks: tuple[Check, ...] = field(default_factory=tuple)
    shared: tuple[str, ...] = ()  # "GPU 0 was shared with pid 820 (...)", one per shared target GPU
    allow_busy: bool = False      # judged anyway although shared (--allow-busy)
    idle: tuple[str, ...] = ()    # "GPU 0 also held pid 820 (...)": idle co-tenants, speed judged beside them
    unhealthy: tuple[str, ...] = ()  # "GPU 0 health: Remapped Rows > Pending: Yes", the findings that make it sick

    def __post_init__(self) -> None:
        if not isinstance(self.status, Status):
            object.__setattr__(self, "status", Status(self.status))

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for c in self.checks:
            out[c.status] = out.get(c.status, 0) + 1
        return out

    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.status == FAIL]

    def to_dict(self) -> Json:
        return {"status": self.status, "summary": self.summary, "gpu_proven": self.gpu_proven, "sku": self.sku,
                "gpu_name": self.gpu_name, "counts": self.counts(), "shared": list(self.shared),
                "allow_busy": self.allow_busy, "idle": list(self.idle), "unhealthy": list(self.unhealthy),
                "checks": [c.to_dict() for c in self.checks]}


# ----------------------------------------------------------------------------------- the SKU table
@dataclass(frozen=True)
class Sku:
    id: str
    name: str
    patterns: tuple[str, ...]
    datasheet: Json
    known_good: Json
    targets: Json

    def peak(self, dtype: str | None) -> float | None:
        value = self.datasheet.get(dtype) if dtype else None
        return float(value) if isinstance(value, (int, float)) else None


@dataclass(frozen=True)
class SkuTable:
    skus: tuple[Sku, ...]
    rules: Json

    def rule(self, name: str) -> tuple[float, str]:
        r = self.rules[name]
        return float(r["value"]), str(r["source"]).strip()

    def match(self, gpu_name: str | None) -> Sku | None:
        if not gpu_name:
            return None
        name = " ".join(gpu_name.split())
        for sku in self.skus:
            if any(re.fullmatch(p, name, re.IGNORECASE) for p in sku.patterns):
                return sku
        return None


_TABLE: SkuTable | None = None


def load_sku_table(path: Path | None = None) -> SkuTable:
    global _TABLE
    if path is None and _TABLE is not None:
        return _TABLE
    raw = yaml.load((path or SKU_TABLE_PATH).read_text(), Loader=_LOADER)
    skus = []
    for sku_id, body in (raw.get("skus") or {}).items():
        skus.append(Sku(id=sku_id, name=body["name"], patterns=tuple(body["match"]),
                        datasheet=dict(body.get("datasheet") or {}), known_good=dict(body.get("known_good") or {}),
                        targets=dict(body.get("targets") or {})))
    table = SkuTable(skus=tuple(skus), rules=dict(raw.get("rules") or {}))
    if path is None:
        _TABLE = table
    return table


# ----------------------------------------------------------------------------------- helpers
def num(value: object) -> float | None:
    """A number from the report: the script writes NaN/inf as strings, JSON has no literal for them."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value in ("nan", "inf", "-inf"):
        return float(value)
    return None


def fmt(value: object, digits: int = 3) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.{digits}g}"
    return str(value)


@dataclass(frozen=True)
class Context:
    """What every per-result judgment needs: the device, the matched SKU, the table's rules."""

    device: str  # cuda | cpu
    sku: Sku | None
    gpu_name: str | None
    capability: tuple[int, int] | None
    table: SkuTable


def context_for(fingerprint: Json, table: SkuTable | None = None) -> Context:
    table = table or load_sku_table()
    device = fingerprint.get("device") or ("cuda" if fingerprint.get("gpu_count") else "cpu")
    name = fingerprint.get("gpu_name")
    cap = None
    if fingerprint.get("capability"):
        try:
            major, minor = str(fingerprint["capability"]).split(".")
            cap = (int(major), int(minor))
        except ValueError:
            cap = None
    return Context(device=device, sku=table.match(name) if device == "cuda" else None, gpu_name=name,
                   capability=cap, table=table)


def _rate_check(ctx: Context, label: str, measured: float | None, unit: str, known_good: Json | None,
                datasheet: float | None, datasheet_label: str, check: str | None, gpu: int | None,
                what: str = "rate") -> Check:
    """Known-good (DCGM 0.75 rule) beats datasheet (warn below half); no entry: reported, not judged."""
    base = partial(Check, name=f"{label}: {what}", measured=measured, unit=unit, check=check, gpu=gpu)
    if measured is None:
        return base(status=FAIL, reason="no measurement")
    if ctx.device != "cuda":
        return base(status=INFO, reason="CPU: measured only, says nothing about a GPU")
    if ctx.sku is None:
        return base(status=INFO, reason=f"unknown GPU '{ctx.gpu_name}': no expected value in gpu_skus.yaml, "
                                        f"reported only")
    if known_good and num(known_good.get("value")) is not None:
        frac, rule_src = ctx.table.rule("known_good_fraction")
        floor = frac * float(known_good["value"])
        ok = measured >= floor
        return base(status=PASS if ok else FAIL, threshold=f">= {fmt(floor)}",
                    source=f"{frac} x known-good {fmt(float(known_good['value']))} {unit} "
                           f"({str(known_good.get('source', '')).strip()}); rule: {rule_src}",
                    reason=(f"{fmt(measured / float(known_good['value']) * 100, 3)}% of the known-good value"))
    if datasheet:
        frac, rule_src = ctx.table.rule("datasheet_warn_fraction")
        floor = frac * datasheet
        ok = measured >= floor
        return base(status=PASS if ok else WARN, threshold=f">= {fmt(floor)}",
                    source=f"{frac} x datasheet {datasheet_label} {fmt(datasheet)} {unit} "
                           f"({str(ctx.sku.datasheet.get('source', '')).strip()}); rule: {rule_src}",
                    reason=f"{fmt(measured / datasheet * 100, 3)}% of the dense datasheet peak")
    return base(status=INFO, reason=f"{ctx.sku.name}: no datasheet or known-good value for this")


# ----------------------------------------------------------------------------------- per result
def judge_result(result: Json, ctx: Context) -> list[Check]:
    """Checks for one result event (what the CLI can show live, before the report arrives)."""
    kind = result.get("kind")
    check = result.get("check")
    gpu = result.get("gpu")
    label = _label(result)
    if result.get("error"):
        return [Check(name=f"{label}: ran", status=FAIL, reason=str(result["error"]), check=check, gpu=gpu)]
    if result.get("skipped"):
        return [Check(name=f"{label}: ran", status=SKIP, reason=str(result["skipped"]), check=check, gpu=gpu)]
    if kind == "fingerprint":
        return _judge_fingerprint(result, ctx)
    if kind == "matmul":
        return _judge_matmul(result, ctx, label)
    if kind == "bandwidth":
        return _judge_bandwidth(result, ctx, label)
    if kind == "probe":
        return _judge_probe(result, label)
    if kind == "train":
        return _judge_train(result, ctx, label)
    if kind == "allreduce":
        return _judge_allreduce(result, label)
    return [Check(name=label, status=INFO, reason=f"unknown result kind {kind!r}", check=check, gpu=gpu)]


def _label(result: Json) -> str:
    kind, check = result.get("kind"), result.get("check") or "?"
    if (kind == "train" and not result.get("model")) or (kind == "matmul" and not result.get("dtype")):
        return check  # a result that failed before it described itself
    gpu = result.get("gpu")
    where = f" (GPU {gpu})" if isinstance(gpu, int) and gpu > 0 else ""
    if kind == "matmul":
        return f"matmul {result.get('dtype', '?')}{where}"
    if kind == "bandwidth":
        return f"device copy{where}"
    if kind == "train":
        model = str(result.get("model"))
        model = {"gpt": "GPT", "resnet": "ResNet"}.get(model, model)
        mode = result.get("mode", "?") + (" + compile" if result.get("compiled") else "")
        if result.get("ddp"):
            mode += f" DDP x{result.get('world_size')}"
        return f"{model} {mode}"
    if kind == "probe":
        return "fp16 underflow probe"
    if kind == "allreduce":
        return "all-reduce"
    return check


def _judge_fingerprint(fp: Json, ctx: Context) -> list[Check]:
    sw = (f"torch {fp.get('torch')}, CUDA {fp.get('torch_cuda')}, cuDNN {fp.get('cudnn')}, "
          f"driver {fp.get('driver')}")
    out = []
    if ctx.device != "cuda":
        out.append(Check(name="GPU", status=INFO, measured="none",
                         reason="no GPU: nothing about a GPU was proven (CPU smoke only)", check="fingerprint"))
        out.append(Check(name="software", status=INFO, measured=f"torch {fp.get('torch')}",
                         reason=f"python {fp.get('python')}; bf16 autocast on the CPU: "
                                f"{'yes' if fp.get('cpu_bf16_autocast') else 'no'}", check="fingerprint"))
        return out
    gpus = fp.get("gpus") or []
    mem = gpus[0].get("memory_bytes") if gpus else None
    desc = f"{fp.get('gpu_count')} x {ctx.gpu_name}" + (f", {mem / 2**30:.0f} GiB" if mem else "")
    desc += f", compute capability {fp.get('capability')}"
    if ctx.sku:
        out.append(Check(name="GPU", status=INFO, measured=desc, reason=f"matched {ctx.sku.name} ({ctx.sku.id})",
                         check="fingerprint", source="gpu_skus.yaml"))
    else:
        out.append(Check(name="GPU", status=INFO, measured=desc,
                         reason="unknown GPU: not in gpu_skus.yaml; its rates are reported, never judged",
                         check="fingerprint"))
    out.append(Check(name="software", status=INFO, measured=sw, check="fingerprint",
                     reason=f"bf16 tensor cores: {'yes' if fp.get('bf16_supported') else 'no'}"))
    tf32 = fp.get("tf32") or {}
    if tf32.get("matmul_tf32"):
        out.append(Check(name="TF32 matmul default", status=INFO, measured="on", check="fingerprint",
                         reason="TF32 matmuls were already on at start (environment); 'fp32' code in this "
                                "environment runs as TF32"))
    return out


def _judge_matmul(r: Json, ctx: Context, label: str) -> list[Check]:
    dtype, check, gpu = r.get("dtype"), r.get("check"), r.get("gpu")
    out = []
    if r.get("finite") is False:
        out.append(Check(name=f"{label}: finite", status=FAIL, reason="the product holds NaN or inf",
                         check=check, gpu=gpu, source=FINITE_SOURCE))
    limit, why = ACCURACY.get(str(dtype), (None, ""))
    err = num(r.get("rel_err_vs_fp64"))
    if limit is not None and err is not None:
        ok = math.isfinite(err) and err <= limit
        out.append(Check(name=f"{label}: accuracy", status=PASS if ok else FAIL, measured=err, unit="rel. error",
                         threshold=f"<= {limit:g}", source=f"float64 reference on the same inputs; {why}",
                         reason="matches float64" if ok else "wrong results: far from the float64 reference",
                         check=check, gpu=gpu))
    mism = r.get("repeat_mismatches")
    if mism is not None:
        out.append(Check(name=f"{label}: repeatable", status=PASS if mism == 0 else FAIL, measured=mism,
                         unit="mismatching elements", threshold="== 0", source=GPU_BURN_SOURCE,
                         reason=f"{r.get('repeat_runs')} repeats identical" if mism == 0
                         else "repeated products differ: a faulty GPU (gpu-burn would say FAULTY)",
                         check=check, gpu=gpu))
    kg = ctx.sku.known_good.get(f"matmul_{dtype}") if ctx.sku else None
    if kg and kg.get("n") is not None and kg.get("n") != r.get("n"):
        kg = None  # a known-good value holds for its own matrix size only (clocks fall on longer products)
    peak = ctx.sku.peak(dtype) if ctx.sku else None
    out.append(_rate_check(ctx, label, num(r.get("tflops")), "TFLOP/s", kg, peak, f"dense {dtype}", check, gpu))
    return out


def _judge_bandwidth(r: Json, ctx: Context, label: str) -> list[Check]:
    check, gpu = r.get("check"), r.get("gpu")
    out = [Check(name=f"{label}: correct", status=PASS if r.get("correct") else FAIL, measured=r.get("correct"),
                 threshold="copy == source", source="bytes copied must equal the source",
                 reason="copy is exact" if r.get("correct") else "the copy differs from its source",
                 check=check, gpu=gpu)]
    kg = ctx.sku.known_good.get("memcpy") if ctx.sku else None
    if kg and kg.get("bytes") is not None and kg.get("bytes") != r.get("bytes"):
        kg = None
    peak = ctx.sku.peak("mem_bw_gbs") if ctx.sku else None
    out.append(_rate_check(ctx, label, num(r.get("gbps")), "GB/s", kg, peak, "memory bandwidth", check, gpu))
    return out


def _judge_probe(r: Json, label: str) -> list[Check]:
    check, gpu = r.get("check"), r.get("gpu")
    zero = num(r.get("grad_zero_fraction"))
    scaler = bool(r.get("scaler"))
    how = "with GradScaler" if scaler else "WITHOUT GradScaler"
    out = []
    if zero is not None:
        ok = zero < 0.9
        out.append(Check(
            name=f"{label}: gradients survive ({how})", status=PASS if ok else FAIL, measured=zero,
            unit="fraction of gradients exactly 0", threshold="< 0.9", source=UNDERFLOW_SOURCE,
            reason="gradients survive fp16" if ok else
            f"gradients underflowed to zero in fp16 {how.replace('WITHOUT', 'without')}: nothing can be learned",
            check=check, gpu=gpu))
    out += _loss_checks(r, label, check, gpu, ratio=0.95)
    return out


def _loss_checks(r: Json, label: str, check: str | None, gpu: int | None,
                 ratio: float = LOSS_FALL_RATIO) -> list[Check]:
    out = []
    bad = int(r.get("nonfinite_losses") or 0)
    params_ok = r.get("params_finite", True) is not False
    if bad or not params_ok:
        first = r.get("first_nonfinite_step")
        why = f"non-finite loss at {bad} step(s), first at step {first}" if bad else ""
        if not params_ok:
            why = (why + "; " if why else "") + "non-finite weights after training"
        if r.get("inject"):
            why += f" (injected fault: {r['inject']})"
        out.append(Check(name=f"{label}: finite", status=FAIL, measured=bad, unit="non-finite losses",
                         threshold="== 0", source=FINITE_SOURCE, reason=why, check=check, gpu=gpu))
        out.append(Check(name=f"{label}: loss falls", status=SKIP, reason="loss is not finite", check=check, gpu=gpu))
        return out
    out.append(Check(name=f"{label}: finite", status=PASS, measured=0, unit="non-finite losses", threshold="== 0",
                     source=FINITE_SOURCE, reason="every loss and weight finite", check=check, gpu=gpu))
    first, last = num(r.get("loss_first")), num(r.get("loss_last"))
    if first is None or last is None or first <= 0:
        return out
    measured = last / first
    ok = measured <= ratio
    out.append(Check(name=f"{label}: loss falls", status=PASS if ok else FAIL, measured=measured,
                     unit="last/first loss", threshold=f"<= {ratio:g}", source=LOSS_FALL_SOURCE,
                     reason=f"{fmt(first)} -> {fmt(last)}" if ok else
                     f"loss did not fall on a memorisable batch ({fmt(first)} -> {fmt(last)})",
                     check=check, gpu=gpu))
    return out


def _judge_train(r: Json, ctx: Context, label: str) -> list[Check]:
    check, gpu = r.get("check"), r.get("gpu")
    out = _loss_checks(r, label, check, gpu)
    if r.get("scaler"):
        scale = num(r.get("scaler_scale_final"))
        if scale is not None:
            ok = scale >= 1.0
            out.append(Check(name=f"{label}: GradScaler scale", status=PASS if ok else FAIL, measured=scale,
                             threshold=">= 1", source=SCALER_SOURCE,
                             reason="scale healthy" if ok else "GradScaler's scale collapsed: every step overflows",
                             check=check, gpu=gpu))
        timed = int(r.get("steps", 0)) - int(r.get("warmup", 0))
        skipped = r.get("skipped_after_warmup")
        if timed > 0 and skipped is not None:
            frac = max(0, int(skipped)) / timed
            status = FAIL if frac >= SKIP_FAIL else WARN if frac > SKIP_WARN else PASS
            out.append(Check(name=f"{label}: skipped steps", status=status, measured=int(skipped),
                             unit=f"of {timed} timed steps", threshold=f"<= {SKIP_WARN:.0%} (fail >= {SKIP_FAIL:.0%})",
                             source=SKIP_SOURCE, reason=f"{frac:.0%} of timed steps skipped by GradScaler",
                             check=check, gpu=gpu))
    if r.get("ddp") and r.get("ranks_in_sync") is not None:
        ok = bool(r["ranks_in_sync"])
        out.append(Check(name=f"{label}: ranks in sync", status=PASS if ok else FAIL, measured=ok,
                         threshold="identical weights", source=DDP_SYNC_SOURCE,
                         reason="weights identical on every rank" if ok else "ranks diverged", check=check, gpu=gpu))
    out.append(_train_rate(r, ctx, label))
    mfu = _mfu_check(r, ctx, label)
    if mfu:
        out.append(mfu)
    if r.get("peak_mem_bytes"):
        out.append(Check(name=f"{label}: peak memory", status=INFO, measured=round(r["peak_mem_bytes"] / 2**30, 2),
                         unit="GiB", check=check, gpu=gpu, reason="torch.cuda.max_memory_allocated"))
    return out


def _mode_key(r: Json) -> str:
    return str(r.get("mode", "?")) + ("-compile" if r.get("compiled") else "")


def _train_rate(r: Json, ctx: Context, label: str) -> Check:
    unit = r.get("throughput_unit", "")
    measured = num(r.get("throughput"))
    kg = None
    if ctx.sku and not r.get("ddp"):
        per_workload = (ctx.sku.known_good.get("train") or {}).get(r.get("workload"))
        if per_workload and _mode_key(r) in per_workload:
            kg = {"value": per_workload[_mode_key(r)], "source": per_workload.get("source", "")}
    if kg is None:
        base = partial(Check, name=f"{label}: throughput", measured=measured, unit=unit, check=r.get("check"),
                       gpu=r.get("gpu"))
        step = f"step {fmt(num(r.get('step_ms')))} ms"
        if ctx.device != "cuda":
            return base(status=INFO, reason=f"CPU: {step}; says nothing about a GPU")
        why = "no known-good value for this workload on this SKU" if ctx.sku else f"unknown GPU '{ctx.gpu_name}'"
        if r.get("ddp") and r.get("scaling_efficiency") is not None:
            why = f"scaling efficiency {fmt(num(r['scaling_efficiency']))} vs one GPU; " + why
        return base(status=INFO, reason=f"{step}; {why}: reported only")
    return _rate_check(ctx, label, measured, unit, kg, None, "", r.get("check"), r.get("gpu"), what="throughput")


def _dtype_of_mode(r: Json) -> str:
    if r.get("amp_dtype") == "bfloat16":
        return "bf16"
    if r.get("amp_dtype") == "float16":
        return "fp16"
    return "tf32" if r.get("mode") == "tf32" else "fp32"


def _mfu_check(r: Json, ctx: Context, label: str) -> Check | None:
    tflops = num(r.get("model_tflops"))
    if tflops is None or ctx.device != "cuda" or r.get("ddp"):
        return None
    check, gpu = r.get("check"), r.get("gpu")
    dtype = _dtype_of_mode(r)
    peak = ctx.sku.peak(dtype) if ctx.sku else None
    if not peak or ctx.sku is None:
        return Check(name=f"{label}: MFU", status=INFO, measured=tflops, unit="model TFLOP/s", check=check, gpu=gpu,
                     reason="no dense peak known for this GPU: MFU not computed")
    mfu = tflops / peak
    base = partial(Check, name=f"{label}: MFU", measured=round(mfu, 4),
                   unit=f"of dense {dtype} peak {fmt(peak)} TFLOP/s", check=check, gpu=gpu)
    target = (ctx.sku.targets.get("mfu") or {}).get(check)
    formula = "model FLOPs 6N + 12*L*d*T per token (PaLM / nanoGPT)"
    if target:
        ok = mfu >= float(target["min"])
        return base(status=PASS if ok else FAIL, threshold=f">= {float(target['min']):g}",
                    source=str(target.get("source", "")).strip(), reason=f"{fmt(tflops)} TFLOP/s; {formula}")
    return base(status=INFO, source=ctx.sku.datasheet.get("source"), reason=f"{fmt(tflops)} TFLOP/s; {formula}")


def _judge_allreduce(r: Json, label: str) -> list[Check]:
    check = r.get("check")
    ok = bool(r.get("correct"))
    return [
        Check(name=f"{label}: correct", status=PASS if ok else FAIL, measured=r.get("max_abs_err"),
              unit="max abs error",
              threshold="== 0", source=ALLREDUCE_SOURCE, check=check,
              reason=f"exact sum over {r.get('world_size')} ranks" if ok else "all-reduce returned a wrong sum"),
        Check(name=f"{label}: bus bandwidth", status=INFO, measured=num(r.get("busbw_gbs")), unit="GB/s", check=check,
              source="nccl-tests: busbw = algbw x 2(n-1)/n",
              reason=f"{r.get('backend')}, {r.get('world_size')} ranks, {fmt((r.get('bytes') or 0) / 2**20)} MiB; "
                     "no known-good value in gpu_skus.yaml: reported only"),
    ]


# ----------------------------------------------------------------------------------- AMP comparisons
def _amp_checks(results: list[Json], ctx: Context) -> list[Check]:
    out = []
    by = {(r.get("model"), _mode_key(r)): r for r in results
          if r.get("kind") == "train" and not r.get("error") and not r.get("ddp") and not r.get("compiled")}
    for model in ("gpt", "resnet"):
        name = {"gpt": "GPT", "resnet": "ResNet"}[model]
        fp32, tf32 = by.get((model, "fp32")), by.get((model, "tf32"))
        targets = ((ctx.sku.targets.get("amp") or {}).get(model) if ctx.sku else None) or {}
        tsrc = str(targets.get("source", "")).strip()
        for amp in ("fp16", "bf16"):
            r = by.get((model, amp))
            if not r:
                continue
            label = f"{name} {amp} AMP"
            if fp32:
                out.append(_speedup(ctx, f"{label}: speedup vs fp32", fp32, r, targets.get("vs_fp32_min"), tsrc,
                                    baseline="strict fp32"))
            if tf32:
                out.append(_speedup(ctx, f"{label}: speedup vs tf32", tf32, r, targets.get("vs_tf32_min"), tsrc,
                                    baseline="tf32"))
            if fp32 and fp32.get("peak_mem_bytes") and r.get("peak_mem_bytes"):
                ratio = r["peak_mem_bytes"] / fp32["peak_mem_bytes"]
                limit = targets.get("mem_ratio_max")
                if limit is not None:
                    status, thr, src = (PASS if ratio <= float(limit) else WARN), f"<= {float(limit):g}", tsrc
                else:
                    status, thr = (PASS if ratio < 1.0 else WARN), "< 1"
                    src = "design.md: AMP is bought for speed and memory; no saving at all is worth a look"
                out.append(Check(name=f"{label}: peak memory vs fp32", status=status, measured=round(ratio, 3),
                                 unit="x fp32 peak", threshold=thr, source=src, check=r.get("check"),
                                 reason=f"{r['peak_mem_bytes'] / 2**30:.1f} vs "
                                        f"{fp32['peak_mem_bytes'] / 2**30:.1f} GiB"))
            if fp32 and _finite(r) and _finite(fp32):
                a, b, start = num(r.get("loss_last")), num(fp32.get("loss_last")), num(fp32.get("loss_first"))
                if a is not None and b is not None and start:
                    dev = abs(a - b) / abs(start)
                    out.append(Check(name=f"{label}: loss tracks fp32", status=PASS if dev <= AMP_LOSS_TOL else WARN,
                                     measured=round(dev, 4), unit="last-loss difference / starting loss",
                                     threshold=f"<= {AMP_LOSS_TOL:g}", source=AMP_LOSS_SOURCE, check=r.get("check"),
                                     reason=f"{fmt(a)} vs fp32 {fmt(b)}"))
    return out


def _finite(r: Json) -> bool:
    return not r.get("nonfinite_losses") and r.get("params_finite", True) is not False


def _speedup(ctx: Context, name: str, base: Json, amp: Json, target: float | str | None, tsrc: str,
             baseline: str) -> Check:
    b, a = num(base.get("step_ms")), num(amp.get("step_ms"))
    if not a or not b:
        return Check(name=name, status=SKIP, reason="no step time", check=amp.get("check"))
    s = b / a
    reason = f"step {fmt(a)} ms vs {baseline} {fmt(b)} ms"
    common = partial(Check, name=name, measured=round(s, 3), unit="x", check=amp.get("check"))
    if ctx.device != "cuda":
        return common(status=INFO, reason=reason + "; CPU: says nothing about a GPU")
    if target is not None:
        return common(status=PASS if s >= float(target) else FAIL, threshold=f">= {float(target):g}", source=tsrc,
                      reason=reason)
    if baseline == "tf32":
        if ctx.capability and ctx.capability < (8, 0):
            return common(status=INFO, reason=reason + "; no TF32 before compute 8.0")
        return common(status=PASS if s >= 1.0 else WARN, threshold=">= 1", source=AMP_GENERIC_SOURCE, reason=reason)
    return common(status=PASS if s >= 1.0 else FAIL, threshold=">= 1", source=AMP_GENERIC_SOURCE, reason=reason)


# ----------------------------------------------------------------------------------- the whole report
def is_speed(c: Check) -> bool:
    """Rates, throughputs, MFU, speedups and bandwidths: what another process on the GPU makes lower."""
    return (c.name.endswith((": rate", ": throughput", ": MFU", ": bus bandwidth")) or ": speedup vs " in c.name)


def _unjudge(checks: list[Check], shared: dict[int | None, str]) -> list[Check]:
    """Speed checks on a shared GPU: the value is kept, the status becomes not-judged, the reason names who."""
    out = []
    for c in checks:
        why: str | None
        if None in shared:
            why = shared[None]
        else:
            why = "; ".join(shared.values()) if c.gpu is None else shared.get(c.gpu)
        if why is not None and is_speed(c) and c.status in (PASS, WARN, FAIL):
            c = Check(name=c.name, status=NOT_JUDGED, measured=c.measured, unit=c.unit, threshold=c.threshold,
                      source=SHARED_SOURCE, reason=f"{why}: measured, not judged", check=c.check, gpu=c.gpu)
        out.append(c)
    return out


def health_checks(health: list[CheckResult]) -> list[Check]:
    """The host's health findings (checks.health) as the verdict's checks."""
    out = []
    for r in health:
        gpu = r.details.get("gpu_in_run")
        source = r.details.get("source")
        out.append(Check(name=r.title, status=r.status, measured=r.value,
                         source=source if isinstance(source, str) else HEALTH_SOURCE,
                         reason=r.remedy or "", check=r.id, gpu=gpu if isinstance(gpu, int) else None))
    return out


def judge_report(report: Json, table: SkuTable | None = None, *, shared: dict[int | None, str] | None = None,
                 allow_busy: bool = False, idle: dict[int | None, str] | None = None,
                 health: list[CheckResult] | None = None) -> Verdict:
    """The verdict on a report. `shared`: the run's GPU index (None: which is unknown) -> who else used it
    during the run ("GPU 0 was shared with pid 820 (...)"). Speed checks on those GPUs are not judged and the
    verdict is BUSY (a failed correctness check still fails), unless allow_busy: then everything is judged and
    the report says it was judged anyway. `idle`: co-tenants that held memory and no SM time: named, speed judged.
    `health`: the host's health findings for the run's GPUs (checks.health): an UNHEALTHY one makes every speed
    check not judged and the verdict UNHEALTHY, the finding first."""
    shared = dict(shared or {})
    idle = dict(idle or {})
    health = list(health or [])
    sick = [r for r in health if r.status == FAIL and r.details.get("unhealthy")]
    fp = report.get("fingerprint") or {}
    ctx = context_for(fp, table)
    results = [r for r in report.get("results") or [] if isinstance(r, dict)]
    checks: list[Check] = []
    if not any(r.get("kind") == "fingerprint" for r in results):
        checks += _judge_fingerprint(fp, ctx)
    for r in results:
        checks += judge_result(r, ctx)
    checks += _amp_checks(results, ctx)
    if shared and ctx.device == "cuda":
        if allow_busy:
            checks.append(Check(name="shared GPU", status=INFO, measured="judged anyway", source=SHARED_SOURCE,
                                reason="; ".join(shared.values()) + ": speed judged anyway (--allow-busy); low "
                                       "rates may be the other processes' doing"))
        else:
            checks = _unjudge(checks, shared)
    if idle and ctx.device == "cuda":
        for where in dict.fromkeys(idle.values()):
            checks.append(Check(name="idle co-tenant", status=INFO, measured=f"{where}: speed judged",
                                source=IDLE_SOURCE,
                                reason=f"{where}: it held memory, no SM time, in every sample of the run"))
    sick_words = tuple(dict.fromkeys(f"{r.title}: {r.value}" for r in sick))
    if ctx.device == "cuda":
        checks += health_checks(health)
        if sick:
            checks = _unjudge(checks, {None: f"UNHEALTHY ({sick_words[0]})"})
    if report.get("inject"):
        checks.append(Check(name="fault injection", status=INFO, measured=report["inject"],
                            reason="a fault was planted on purpose (--inject): this run tests devenv, not the host"))
    worst = max((_RANK[c.status] for c in checks), default=0)
    counts = {s: sum(1 for c in checks if c.status == s) for s in (PASS, WARN, FAIL, NOT_JUDGED)}
    tally = f"{counts[PASS]} passed, {counts[WARN]} warned, {counts[FAIL]} failed"
    if counts[NOT_JUDGED]:
        tally += f", {counts[NOT_JUDGED]} not judged"
    health_ids = {r.id for r in health}
    fails = [c for c in checks if c.status == FAIL and c.check not in health_ids]  # a sick GPU is said first
    if ctx.device != "cuda":
        status = FAIL if worst == _RANK[FAIL] else NO_GPU
        summary = f"no GPU: nothing about a GPU was proven (CPU smoke: {tally})"
    else:
        judged = [c for c in checks if c.status in (PASS, WARN, FAIL)]
        if not judged:
            status, summary = FAIL, "nothing was measured on the GPU"
        else:
            status = {3: FAIL, 2: WARN}.get(worst, PASS)
            who = ctx.sku.name if ctx.sku else f"unknown GPU '{ctx.gpu_name}' (rates not judged)"
            summary = f"{who}: {tally}"
            if counts[NOT_JUDGED]:
                whom = "; ".join(dict.fromkeys(shared.values()))
                if status != FAIL:
                    status = BUSY
                    summary = f"{whom}: speed not judged ({who}: {tally})"
                else:
                    summary += f"; {whom}: speed not judged"
            elif shared and allow_busy:
                summary += f"; judged although {'; '.join(dict.fromkeys(shared.values()))} (--allow-busy)"
            if idle and not sick:
                summary += f"; {'; '.join(dict.fromkeys(idle.values()))}: idle, speed judged"
            if sick:
                status = UNHEALTHY
                more = f" (and {len(sick_words) - 1} more)" if len(sick_words) > 1 else ""
                summary = f"{sick_words[0]}{more}: speed not judged ({who}: {tally})"
    if fails:
        summary += f"; first failure: {fails[0].name}: {fails[0].reason}"
    return Verdict(status=status, summary=summary, gpu_proven=ctx.device == "cuda" and status != FAIL,
                   sku=ctx.sku.id if ctx.sku else None, gpu_name=ctx.gpu_name, checks=tuple(checks),
                   shared=tuple(dict.fromkeys(shared.values())) if ctx.device == "cuda" else (),
                   allow_busy=allow_busy and bool(shared),
                   idle=tuple(dict.fromkeys(idle.values())) if ctx.device == "cuda" else (),
                   unhealthy=sick_words if ctx.device == "cuda" else ())
