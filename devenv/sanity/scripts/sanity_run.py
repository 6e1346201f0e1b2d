#!/usr/bin/env python3
"""devenv sanity: GPU health and mixed-precision training checks, run ON the GPU host.

One self-contained file (standard library + torch): devenv ships it over SSH and runs it with the
environment's python. It measures; it does not judge. The laptop judges the numbers against its
per-SKU table (devenv/sanity/verdict.py), so this file carries no expectations.

stdout carries JSON lines only, one object each:
  {"event": "start", ...}                      once, before torch is imported
  {"event": "progress", "step": ..., "i": k, "n": N, "msg": ...}
  {"event": "result", "check": ..., "kind": ..., ...}   one per measurement (or "error": ...)
  {"event": "report", ...}                     last: fingerprint + every result
  {"event": "fatal", "error": ..., "message": ...}      instead of a report when nothing can run
Anything else a library prints goes to stderr (fd 1 is pointed at fd 2 once the real stdout is kept).

Usage: python3 sanity_run.py --suite quick|full [--device auto|cpu|cuda] [--inject inf|fp16-no-scaler]
       [--only matmul,memcpy,probe,gpt,resnet,compile,pergpu,ddp]
The full suite's multi-GPU part starts this same file under torchrun with --ddp-worker.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
import traceback

SCRIPT_VERSION = 1
SCHEMA = 1
STAGES = ("matmul", "memcpy", "probe", "gpt", "resnet", "compile", "pergpu", "ddp")

_OUT = None  # the real stdout, kept for JSON lines


def claim_stdout() -> None:
    """Keep fd 1 for our JSON lines and send every other write to fd 1 (C libraries too) to stderr."""
    global _OUT
    keep = os.dup(1)
    os.dup2(2, 1)
    _OUT = os.fdopen(keep, "w", buffering=1)
    sys.stdout = sys.stderr


def _clean(value):
    """JSON has no NaN/inf: write them as strings, so the laptop still sees what went wrong."""
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return value
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def emit(event: str, **fields) -> None:
    out = _OUT or sys.stdout
    out.write(json.dumps(_clean({"event": event, **fields}), default=str) + "\n")
    out.flush()


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


# --------------------------------------------------------------------------------------------
# torch is imported lazily so that a missing torch becomes one clear "fatal" line, not a traceback.
torch = nn = F = None


def import_torch() -> None:
    global torch, nn, F
    import torch as _torch
    import torch.nn as _nn
    import torch.nn.functional as _F

    torch, nn, F = _torch, _nn, _F


# ------------------------------------------------------------------ precision flags (old and new API)
def _new_tf32_api() -> bool:
    # torch >= 2.9: fp32_precision; mixing it with allow_tf32 raises, so use one API only.
    return hasattr(torch.backends.cuda.matmul, "fp32_precision")


def read_tf32() -> dict:
    flags = {"api": "fp32_precision" if _new_tf32_api() else "allow_tf32"}
    try:
        if _new_tf32_api():
            mm = torch.backends.cuda.matmul.fp32_precision
            conv = torch.backends.cudnn.conv.fp32_precision
            glob = getattr(torch.backends, "fp32_precision", "none")
            flags.update(matmul_precision=mm, cudnn_conv_precision=conv, global_precision=glob,
                         matmul_tf32=(mm == "tf32" or (mm == "none" and glob == "tf32")),
                         cudnn_tf32=(conv == "tf32" or (conv == "none" and glob == "tf32")))
        else:
            flags.update(matmul_tf32=bool(torch.backends.cuda.matmul.allow_tf32),
                         cudnn_tf32=bool(torch.backends.cudnn.allow_tf32))
    except Exception as exc:  # a flag we cannot read is NA, never a crash
        flags["error"] = f"{type(exc).__name__}: {exc}"
    return flags


_INITIAL_TF32: dict = {}


def set_tf32(matmul: bool, cudnn: bool) -> None:
    if _new_tf32_api():
        torch.backends.cuda.matmul.fp32_precision = "tf32" if matmul else "ieee"
        torch.backends.cudnn.conv.fp32_precision = "tf32" if cudnn else "ieee"
    else:
        torch.backends.cuda.matmul.allow_tf32 = matmul
        torch.backends.cudnn.allow_tf32 = cudnn


def restore_tf32() -> None:
    """Back to what this process started with (PyTorch's defaults unless the environment changed them)."""
    set_tf32(bool(_INITIAL_TF32.get("matmul_tf32", False)), bool(_INITIAL_TF32.get("cudnn_tf32", True)))


# ------------------------------------------------------------------------------------ fingerprint
def nvidia_smi() -> dict:
    # on PATH, else where drivers put it (WSL2's folder is on PATH in login shells only): devenv.gpu.nvsmi.SEARCH_DIRS
    exe = shutil.which("nvidia-smi") or shutil.which(
        "nvidia-smi", path="/usr/bin:/usr/local/bin:/usr/lib/wsl/lib:/usr/local/nvidia/bin")
    if not exe:
        return {"available": False}
    try:
        done = subprocess.run(
            [exe, "--query-gpu=index,name,driver_version,memory.total,pci.bus_id",
             "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=10)  # a hung driver
    except Exception as exc:
        return {"available": False, "error": str(exc)}
    rows = []
    for line in done.stdout.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 5:
            rows.append({"index": parts[0], "name": parts[1], "driver": parts[2],
                         "memory_mib": parts[3], "pci_bus_id": parts[4]})
    return {"available": done.returncode == 0, "gpus": rows,
            "driver": rows[0]["driver"] if rows else None}


def fingerprint(device) -> dict:
    fp = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torch_cuda": getattr(torch.version, "cuda", None),
        "cuda_available": torch.cuda.is_available(),
        "device": device.type,
        "tf32": dict(_INITIAL_TF32),
        "cpu_bf16_autocast": _autocast_ok("cpu", torch.bfloat16),
    }
    try:
        fp["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        fp["cudnn_enabled"] = bool(torch.backends.cudnn.enabled)
    except Exception:
        fp["cudnn"] = None
    if device.type == "cuda":
        gpus = []
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            gpus.append({"index": i, "name": p.name, "memory_bytes": int(p.total_memory),
                         "memory_free_bytes": _free_bytes(i) if i == device.index else None,  # no context elsewhere
                         "capability": f"{p.major}.{p.minor}", "sm_count": p.multi_processor_count,
                         "uuid": _uuid(p)})
        fp["gpus"] = gpus
        fp["gpu_count"] = len(gpus)
        fp["gpu_name"] = gpus[0]["name"] if gpus else None
        fp["capability"] = gpus[0]["capability"] if gpus else None
        fp["bf16_supported"] = bool(torch.cuda.get_device_capability(0) >= (8, 0))
        fp["cudnn_benchmark"] = bool(torch.backends.cudnn.benchmark)
        try:
            fp["arch_list"] = torch.cuda.get_arch_list()
        except Exception:
            fp["arch_list"] = None
        smi = nvidia_smi()
        fp["driver"] = smi.get("driver")
        fp["nvidia_smi"] = smi
        fp["env"] = {k: os.environ[k] for k in sorted(os.environ)
                     if k.startswith(("NCCL_", "TORCH_ALLOW_TF32", "CUDA_VISIBLE_DEVICES", "TORCH_SYMM_MEM"))}
    else:
        fp["gpus"] = []
        fp["gpu_count"] = 0
    return fp


def _uuid(props):
    """The GPU's UUID as nvidia-smi spells it (GPU-...), so the laptop can match it with the host's processes."""
    raw = getattr(props, "uuid", None)
    if raw is None:
        return None
    text = str(raw)
    return text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"


def _autocast_ok(device_type: str, dtype) -> bool:
    try:
        with torch.amp.autocast(device_type, dtype=dtype):
            torch.ones(2, 2) @ torch.ones(2, 2)
        return True
    except Exception:
        return False


# ------------------------------------------------------------------------------------ timing
def sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_ms(fn, device, warmup: int, reps: int) -> list[float]:
    """Per-call times in ms: CUDA events on a GPU (no host sync inside the loop), perf_counter on the CPU."""
    for _ in range(warmup):
        fn()
    sync(device)
    if device.type == "cuda":
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for s, e in zip(starts, ends):
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize(device)
        return [s.elapsed_time(e) for s, e in zip(starts, ends)]
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1e3)
    return out


def free_memory(device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


# ------------------------------------------------------------------------------------ sizes
def _free_bytes(device) -> int | None:
    """The GPU memory free now: another process (an idle co-tenant) may hold part of it."""
    try:
        return int(torch.cuda.mem_get_info(device)[0])
    except Exception:
        return None


def _usable_bytes(gpu: dict) -> int:
    """What the workloads are sized by: the memory free at the start (a co-tenant's share is not ours)."""
    free = gpu.get("memory_free_bytes")
    return min(gpu["memory_bytes"], free) if isinstance(free, int) else gpu["memory_bytes"]


def plan_sizes(device, suite: str, mem_bytes: int | None) -> dict:
    if device.type != "cuda":  # a short CPU smoke: same code paths, toy shapes
        return {
            "matmul_n": 512, "matmul_reps": 5, "matmul_dtypes": ("fp32", "bf16"),
            "memcpy_bytes": 64 << 20, "memcpy_reps": 5,
            "gpt": dict(n_layer=2, n_embd=128, n_head=4, block=64, vocab=512, batch=8, lr=1e-3,
                        steps=16, warmup=2, distinct_tokens=16, name="tiny-gpt"),
            "resnet": dict(layers=(1, 1, 1, 1), width=16, img=32, batch=8, classes=10, label_classes=4,
                           lr=3e-3, steps=10, warmup=2, name="tiny-resnet"),
            # fp16 convolutions are slow on a CPU; the GPT and the probe cover fp16 + GradScaler there
            "modes": {"gpt": ("fp32", "fp16", "bf16"), "resnet": ("fp32", "bf16")},
            "probe_steps": 20,
        }
    gib = (mem_bytes or 0) / 2**30
    gpt_batch = 16 if gib >= 40 else 8 if gib >= 20 else 4
    cnn_batch = 256 if gib >= 40 else 128 if gib >= 20 else 64
    full = suite == "full"
    return {
        "matmul_n": 16384 if full else 8192, "matmul_reps": 10 if full else 20,
        "matmul_dtypes": ("fp32", "tf32", "fp16", "bf16"),
        "memcpy_bytes": int(min(4 << 30 if full else 2 << 30, (mem_bytes or 2**31) // 8)), "memcpy_reps": 20,
        "gpt": dict(n_layer=12, n_embd=768, n_head=12, block=1024, vocab=50304, batch=gpt_batch, lr=6e-4,
                    steps=40 if full else 15, warmup=5 if full else 3, distinct_tokens=64,
                    name=f"gpt2-small/b{gpt_batch}/t1024"),
        "resnet": dict(layers=(3, 4, 6, 3), width=64, img=224, batch=cnn_batch, classes=1000, label_classes=10,
                       lr=1e-3, steps=30 if full else 15, warmup=5 if full else 3,
                       name=f"resnet50/b{cnn_batch}/224/channels_last"),
        "modes": {"gpt": ("fp32", "tf32", "fp16", "bf16"), "resnet": ("fp32", "tf32", "fp16", "bf16")},
        "probe_steps": 30,
    }


# ------------------------------------------------------------------------------------ matmul
MATMUL_DTYPES = {"fp32": "float32", "tf32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def check_matmul(device, name: str, n: int, reps: int, check: str) -> dict:
    cap = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
    res = {"check": check, "kind": "matmul", "dtype": name, "n": n, "gpu": _gpu_index(device)}
    if device.type == "cuda" and name in ("tf32", "bf16") and cap < (8, 0):
        res["skipped"] = f"{name} tensor cores need compute capability >= 8.0 (this GPU: {cap[0]}.{cap[1]})"
        return res
    set_tf32(matmul=(name == "tf32"), cudnn=False)
    dtype = getattr(torch, MATMUL_DTYPES[name])
    g = torch.Generator(device=device).manual_seed(1234)
    a = torch.randn(n, n, device=device, generator=g).to(dtype)  # random data: zeros run faster and hide bugs
    b = torch.randn(n, n, device=device, generator=g).to(dtype)
    c = torch.empty(n, n, device=device, dtype=dtype)
    fn = lambda: torch.matmul(a, b, out=c)  # noqa: E731
    times = time_ms(fn, device, warmup=3, reps=reps)
    med = statistics.median(times)
    res.update(ms_median=med, ms_min=min(times), ms_max=max(times), reps=reps,
               tflops=2 * n**3 / (med / 1e3) / 1e12, tflops_best=2 * n**3 / (min(times) / 1e3) / 1e12)
    # accuracy against float64 on the same (already rounded) inputs, for a slab of rows
    rows = min(256, n)
    ref = a[:rows].double() @ b.double()
    res["rel_err_vs_fp64"] = float((c[:rows].double() - ref).norm() / ref.norm())
    # gpu-burn style: the same product repeated must give the same answer
    c0 = c.float().clone()
    tol = 1e-3 * float(c0.pow(2).mean().sqrt())
    mismatches, worst = 0, 0.0
    for _ in range(3):
        fn()
        diff = (c.float() - c0).abs()
        mismatches += int((diff > tol).sum())
        worst = max(worst, float(diff.max()))
    res.update(repeat_runs=3, repeat_mismatches=mismatches, repeat_max_abs_diff=worst, repeat_tolerance=tol,
               finite=bool(torch.isfinite(c0).all()))
    restore_tf32()
    return res


def check_memcpy(device, nbytes: int, reps: int, check: str) -> dict:
    n = nbytes // 4
    x = torch.rand(n, device=device)
    y = torch.empty_like(x)
    times = time_ms(lambda: y.copy_(x), device, warmup=3, reps=reps)
    med = statistics.median(times)
    res = {"check": check, "kind": "bandwidth", "bytes": n * 4, "gpu": _gpu_index(device),
           "ms_median": med, "reps": reps,
           # bytes read plus bytes written, as a device-to-device copy moves both
           "gbps": 2 * n * 4 / (med / 1e3) / 1e9, "gbps_best": 2 * n * 4 / (min(times) / 1e3) / 1e9,
           "correct": bool(torch.equal(x, y))}
    return res


def _gpu_index(device):
    return device.index if device.type == "cuda" else None


# ------------------------------------------------------------------------------------ models
def build_gpt(cfg: dict):
    d, h, T, V, L = cfg["n_embd"], cfg["n_head"], cfg["block"], cfg["vocab"], cfg["n_layer"]

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(d, 3 * d)
            self.c_proj = nn.Linear(d, d)

        def forward(self, x):
            B, t, C = x.shape
            q, k, v = self.c_attn(x).split(C, dim=2)
            q, k, v = (z.view(B, t, h, C // h).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).contiguous().view(B, t, C))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.attn = nn.LayerNorm(d), Attention()
            self.ln_2 = nn.LayerNorm(d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"), nn.Linear(4 * d, d))

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(V, d), nn.Embedding(T, d)
            self.h = nn.ModuleList(Block() for _ in range(L))
            self.ln_f = nn.LayerNorm(d)
            self.lm_head = nn.Linear(d, V, bias=False)
            self.lm_head.weight = self.wte.weight  # tied, as in GPT-2
            for name, p in self.named_parameters():
                if p.dim() >= 2:
                    residual = name.endswith("c_proj.weight") or name.endswith("2.weight")
                    std = 0.02 / math.sqrt(2 * L) if residual else 0.02
                    nn.init.normal_(p, 0.0, std)
                elif name.endswith("bias"):
                    nn.init.zeros_(p)

        def forward(self, idx, targets):
            t = idx.shape[1]
            x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
            for block in self.h:
                x = block(x)
            # no name for the logits: the half-precision copy is freed as soon as the fp32 one exists
            return F.cross_entropy(self.lm_head(self.ln_f(x)).float().view(-1, V), targets.view(-1))

    return GPT()


def gpt_flops_per_token(model, cfg: dict) -> float:
    # PaLM / nanoGPT: 6N + 12 L d T, N without the position embedding (the tied head counts once)
    n = sum(p.numel() for p in model.parameters()) - model.wpe.weight.numel()
    return 6 * n + 12 * cfg["n_layer"] * cfg["n_embd"] * cfg["block"]


def build_resnet(cfg: dict):
    """A compact bottleneck ResNet (ResNet-50 at layers (3,4,6,3), width 64) without torchvision."""

    class Bottleneck(nn.Module):
        def __init__(self, cin, planes, stride):
            super().__init__()
            cout = planes * 4
            self.body = nn.Sequential(
                nn.Conv2d(cin, planes, 1, bias=False), nn.BatchNorm2d(planes), nn.ReLU(inplace=True),
                nn.Conv2d(planes, planes, 3, stride, 1, bias=False), nn.BatchNorm2d(planes), nn.ReLU(inplace=True),
                nn.Conv2d(planes, cout, 1, bias=False), nn.BatchNorm2d(cout))
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            skip = x if self.down is None else self.down(x)
            return F.relu(self.body(x) + skip)

    w = cfg["width"]
    layers = [nn.Conv2d(3, w, 7, 2, 3, bias=False), nn.BatchNorm2d(w), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)]
    cin = w
    for i, count in enumerate(cfg["layers"]):
        planes = w * 2**i
        for j in range(count):
            layers.append(Bottleneck(cin, planes, 2 if (j == 0 and i > 0) else 1))
            cin = planes * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, cfg["classes"])]
    return nn.Sequential(*layers)


def make_optimizer(model, lr: float, device, weight_decay: float = 0.1):
    params = [p for p in model.parameters() if p.requires_grad]
    if device.type == "cuda":
        try:
            return torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=weight_decay, fused=True), True
        except (TypeError, RuntimeError):
            pass
    return torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=weight_decay), False


def make_scaler(device, enabled: bool):
    if not enabled:
        return None
    if hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler(device.type)
    if device.type == "cuda":  # torch < 2.3
        return torch.cuda.amp.GradScaler()
    raise RuntimeError("this torch has no GradScaler for the CPU (needs torch >= 2.3)")


def optimizer_steps_taken(opt) -> int:
    """AdamW counts the steps it really took; a GradScaler skip never reaches it."""
    for group in opt.param_groups:
        for p in group["params"]:
            st = opt.state.get(p, {}).get("step")
            if st is not None:
                return int(st.item() if hasattr(st, "item") else st)
    return 0


# ------------------------------------------------------------------------------------ training
MODE_DTYPES = {"fp32": None, "tf32": None, "fp16": "float16", "bf16": "bfloat16"}


def train_run(device, model_name: str, cfg: dict, mode: str, *, compiled=False, inject=None, check=None,
              progress=None) -> dict:
    """Train `cfg`'s model on one fixed, memorisable batch; time each step; record what can go wrong."""
    if device.type == "cuda" and mode == "bf16" and torch.cuda.get_device_capability(device) < (8, 0):
        major, minor = torch.cuda.get_device_capability(device)
        return {"check": check, "kind": "train", "model": model_name, "mode": mode, "compiled": compiled,
                "skipped": f"bf16 tensor cores need compute capability >= 8.0 (this GPU: {major}.{minor})"}
    amp_name = MODE_DTYPES[mode]
    amp_dtype = getattr(torch, amp_name) if amp_name else None
    use_scaler = mode == "fp16"  # bf16 has fp32's exponent range: no scaler needed
    if mode == "fp32":
        set_tf32(matmul=False, cudnn=False)  # strict IEEE fp32: the fair baseline (cuDNN TF32 is on by default)
    elif mode == "tf32":
        set_tf32(matmul=True, cudnn=True)
    else:
        restore_tf32()
    flags = read_tf32()
    res = {"check": check, "kind": "train", "model": model_name, "workload": cfg["name"], "mode": mode,
           "amp_dtype": amp_name, "scaler": bool(use_scaler), "compiled": compiled, "gpu": _gpu_index(device),
           "tf32_matmul": flags.get("matmul_tf32"), "tf32_cudnn": flags.get("cudnn_tf32"),
           "cudnn_benchmark": bool(torch.backends.cudnn.benchmark) if device.type == "cuda" else None,
           "batch": cfg["batch"], "steps": cfg["steps"], "warmup": cfg["warmup"]}
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    t_wall = time.perf_counter()
    torch.manual_seed(0)  # every mode starts from the same weights and sees the same batch
    g = torch.Generator(device="cpu").manual_seed(0)
    if model_name == "gpt":
        with torch.device(device):  # initialise on the device: building 124M weights on a CPU takes seconds
            model = build_gpt(cfg)
        vocab_ids = torch.randperm(cfg["vocab"], generator=g)[: cfg["distinct_tokens"]]
        seq = vocab_ids[torch.randint(0, cfg["distinct_tokens"], (cfg["batch"], cfg["block"] + 1), generator=g)]
        x, y = seq[:, :-1].contiguous().to(device), seq[:, 1:].contiguous().to(device)
        units, unit = cfg["batch"] * cfg["block"], "tok/s"
        flops_per_step = gpt_flops_per_token(model, cfg) * units
        res.update(seq=cfg["block"], params=sum(p.numel() for p in model.parameters()))
    else:
        with torch.device(device):
            model = build_resnet(cfg)
        model = model.to(memory_format=torch.channels_last)
        x = torch.randn(cfg["batch"], 3, cfg["img"], cfg["img"], generator=g)
        x = x.to(device).contiguous(memory_format=torch.channels_last)
        y = torch.randint(0, cfg["label_classes"], (cfg["batch"],), generator=g).to(device)
        units, unit = cfg["batch"], "img/s"
        flops_per_step = None
        res.update(image=cfg["img"], channels_last=True, params=sum(p.numel() for p in model.parameters()))
    opt, fused = make_optimizer(model, cfg["lr"], device)
    scaler = make_scaler(device, use_scaler)
    res["fused_adamw"] = fused
    step_model = torch.compile(model) if compiled else model
    params = [p for p in model.parameters()]
    inject_at = cfg["warmup"] + 1 if inject == "inf" else None

    def loss_of():
        if model_name == "gpt":
            return step_model(x, y)
        return F.cross_entropy(step_model(x).float(), y)

    def one_step():
        opt.zero_grad(set_to_none=True)
        with torch.amp.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            loss = loss_of()
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
        return loss.detach()

    scale_init = float(scaler.get_scale()) if scaler is not None else None
    losses, times = [], []
    compile_s = None
    taken_after_warmup = 0
    use_events = device.type == "cuda"
    for i in range(cfg["steps"]):
        if i == inject_at:  # a corrupted weight, as a bad memory cell or a broken kernel would leave it
            target = model.h[0].attn.c_attn.weight if model_name == "gpt" else params[0]
            with torch.no_grad():
                target.view(-1)[0] = float("inf")
            res["inject"] = f"inf written into a weight before step {i}"
        if i == cfg["warmup"]:
            sync(device)
            taken_after_warmup = optimizer_steps_taken(opt)
        if use_events:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            losses.append(one_step())
            e.record()
            times.append((s, e))
        else:
            t = time.perf_counter()
            losses.append(one_step())
            times.append(time.perf_counter() - t)
        if i == 0:
            sync(device)
            if compiled:
                compile_s = time.perf_counter() - t_wall
                if progress:
                    progress(f"compiled in {compile_s:.1f} s")
    sync(device)
    step_ms = [s.elapsed_time(e) for s, e in times] if use_events else [t * 1e3 for t in times]
    timed = step_ms[cfg["warmup"]:]
    loss_values = [float(v) for v in torch.stack(losses).float().cpu().tolist()]
    nonfinite = [i for i, v in enumerate(loss_values) if not math.isfinite(v)]
    med = statistics.median(timed)
    res.update(
        step_ms=med, step_ms_min=min(timed), step_ms_max=max(timed),
        throughput=units / (med / 1e3), throughput_unit=unit, units_per_step=units,
        losses=loss_values, loss_first=loss_values[0], loss_last=loss_values[-1],
        nonfinite_losses=len(nonfinite), first_nonfinite_step=nonfinite[0] if nonfinite else None,
        params_finite=bool(torch.stack([torch.isfinite(p).all() for p in params]).all()),
        wall_s=time.perf_counter() - t_wall,
    )
    grads = [p.grad for p in params if p.grad is not None]
    if grads:
        total = sum(gr.numel() for gr in grads)
        res["grad_zero_fraction"] = float(sum(int((gr == 0).sum()) for gr in grads) / total)
    if flops_per_step:
        res.update(flops_per_step=flops_per_step, model_tflops=flops_per_step / (med / 1e3) / 1e12)
    if compile_s is not None:
        res["compile_s"] = compile_s
    taken = optimizer_steps_taken(opt)
    res.update(optimizer_steps=taken, skipped_steps=cfg["steps"] - taken,
               skipped_after_warmup=(cfg["steps"] - cfg["warmup"]) - (taken - taken_after_warmup))
    if scaler is not None:
        res.update(scaler_scale_init=scale_init, scaler_scale_final=float(scaler.get_scale()))
    if device.type == "cuda":
        res["peak_mem_bytes"] = int(torch.cuda.max_memory_allocated(device))
    restore_tf32()
    return res


def underflow_probe(device, steps: int, scaler: bool, check: str) -> dict:
    """fp16 autocast on a model whose gradients sit below fp16's smallest subnormal (6e-8).

    The loss is multiplied by 2**-20 (as a loss averaged over a huge count would be): without a GradScaler
    the fp16 backward flushes every gradient to zero and nothing is learned; GradScaler's 2**16 lifts the
    gradients back into range. Runs on the CPU as well (fp16 autocast exists there), so the failure it
    catches is proven without a GPU.
    """
    torch.manual_seed(0)
    g = torch.Generator(device="cpu").manual_seed(1)
    model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 10)).to(device)
    x = torch.randn(256, 64, generator=g).to(device)
    y = torch.randint(0, 10, (256,), generator=g).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    sc = make_scaler(device, scaler)
    factor = 2.0**-20
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        with torch.amp.autocast(device.type, dtype=torch.float16):
            loss = F.cross_entropy(model(x).float(), y)
        scaled = loss * factor
        if sc is not None:
            sc.scale(scaled).backward()
            sc.unscale_(opt)
            sc.step(opt)
            sc.update()
        else:
            scaled.backward()
            opt.step()
        losses.append(loss.detach())
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    total = sum(gr.numel() for gr in grads) or 1
    zero_fraction = float(sum(int((gr == 0).sum()) for gr in grads)) / total if grads else 1.0
    losses = [float(v) for v in torch.stack(losses).float().cpu().tolist()]
    res = {"check": check, "kind": "probe", "probe": "fp16-underflow", "scaler": scaler, "gpu": _gpu_index(device),
           "loss_factor": factor, "steps": steps, "losses": losses, "loss_first": losses[0], "loss_last": losses[-1],
           "grad_zero_fraction": zero_fraction,
           "nonfinite_losses": sum(1 for v in losses if not math.isfinite(v))}
    if sc is not None:
        res["scaler_scale_final"] = float(sc.get_scale())
    return res


# ------------------------------------------------------------------------------------ DDP (full suite)
def run_ddp(args, nproc: int, ref_tok_s, progress) -> list[dict]:
    """Start this file under torchrun, one process per GPU; relay rank 0's JSON lines."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           os.path.abspath(__file__), "--ddp-worker", "--device", args.device_resolved, "--suite", args.suite]
    if ref_tok_s:
        cmd += ["--ref-tok-s", str(ref_tok_s)]
    env = dict(os.environ)
    if args.device_resolved == "cpu":
        env.setdefault("OMP_NUM_THREADS", "1")
    results = []
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=None, text=True, env=env)
    try:
        for line in proc.stdout:
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if ev.get("event") == "result":
                ev.pop("event")
                results.append(ev)
                emit("result", **ev)
            elif ev.get("event") == "progress":
                progress(ev.get("msg", ""))
        code = proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    if code != 0 and not results:
        raise RuntimeError(f"torchrun exited with code {code}")
    return results


def ddp_worker(args) -> int:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, world, local = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
    if args.device == "cuda":
        torch.cuda.set_device(local)
        device, backend = torch.device("cuda", local), "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(backend)
    say = (lambda ev, **f: emit(ev, **f)) if rank == 0 else (lambda ev, **f: None)
    try:
        # all-reduce: integers in float32, so the sum is exact and the check is equality (nccl-tests -c)
        numel = (256 << 20) // 4 if device.type == "cuda" else (4 << 20) // 4
        say("progress", step="ddp/allreduce", msg=f"all-reduce over {world} ranks ({backend})")

        def data(r):
            gen = torch.Generator(device="cpu").manual_seed(100 + r)
            return torch.randint(-1000, 1000, (numel,), generator=gen).float().to(device)

        mine = data(rank)
        expected = sum(data(r) for r in range(world))
        buf = mine.clone()
        dist.all_reduce(buf)
        correct = bool(torch.equal(buf, expected))
        max_err = float((buf - expected).abs().max())
        del expected
        times = time_ms(lambda: dist.all_reduce(buf), device, warmup=5, reps=20)
        med = statistics.median(times)
        algbw = numel * 4 / (med / 1e3) / 1e9
        say("result", check="allreduce", kind="allreduce", backend=backend, world_size=world, bytes=numel * 4,
            ms_median=med, algbw_gbs=algbw, busbw_gbs=algbw * 2 * (world - 1) / world,
            correct=correct, max_abs_err=max_err)
        buf = mine = None  # free the buffers before training
        free_memory(device)

        # data-parallel GPT training, bf16 autocast, each rank its own batch
        mem = _usable_bytes({"memory_bytes": torch.cuda.get_device_properties(device).total_memory,
                             "memory_free_bytes": _free_bytes(device)}) if device.type == "cuda" else None
        cfg = dict(plan_sizes(device, args.suite, mem)["gpt"])
        cfg["steps"], cfg["warmup"] = (20, 3) if device.type == "cuda" else (12, 2)
        say("progress", step="ddp/gpt", msg=f"DDP {cfg['name']} bf16 on {world} ranks")
        torch.manual_seed(0)
        with torch.device(device):
            model = build_gpt(cfg)
        ddp = DDP(model, device_ids=[local] if device.type == "cuda" else None)
        opt, _ = make_optimizer(model, cfg["lr"], device)
        g = torch.Generator(device="cpu").manual_seed(10 + rank)
        ids = torch.randperm(cfg["vocab"], generator=torch.Generator().manual_seed(0))[: cfg["distinct_tokens"]]
        seq = ids[torch.randint(0, cfg["distinct_tokens"], (cfg["batch"], cfg["block"] + 1), generator=g)]
        x, y = seq[:, :-1].contiguous().to(device), seq[:, 1:].contiguous().to(device)
        losses = []

        def step():
            opt.zero_grad(set_to_none=True)
            with torch.amp.autocast(device.type, dtype=torch.bfloat16):
                loss = ddp(x, y)
            loss.backward()
            opt.step()
            losses.append(loss.detach())

        times = time_ms(step, device, warmup=cfg["warmup"], reps=cfg["steps"] - cfg["warmup"])
        med = statistics.median(times)
        vals = [float(v) for v in torch.stack(losses).float().cpu().tolist()]
        # the weights must stay identical on every rank
        flat = torch.cat([p.detach().float().view(-1)[:1024] for p in model.parameters()])
        gathered = [torch.empty_like(flat) for _ in range(world)]
        dist.all_gather(gathered, flat)
        in_sync = all(torch.equal(gathered[0], t) for t in gathered[1:])
        tok_s = world * cfg["batch"] * cfg["block"] / (med / 1e3)
        out = dict(check="train_gpt_ddp_bf16", kind="train", model="gpt", workload=cfg["name"], mode="bf16",
                   ddp=True, world_size=world, backend=backend, amp_dtype="bfloat16", scaler=False, compiled=False,
                   batch=cfg["batch"], steps=cfg["steps"], warmup=cfg["warmup"], step_ms=med,
                   throughput=tok_s, throughput_unit="tok/s", losses=vals, loss_first=vals[0], loss_last=vals[-1],
                   nonfinite_losses=sum(1 for v in vals if not math.isfinite(v)), params_finite=bool(
                       torch.stack([torch.isfinite(p).all() for p in model.parameters()]).all()),
                   ranks_in_sync=in_sync)
        if args.ref_tok_s:
            out["scaling_efficiency"] = tok_s / (world * args.ref_tok_s)
        if device.type == "cuda":
            out["peak_mem_bytes"] = int(torch.cuda.max_memory_allocated(device))
        say("result", **out)
    finally:
        dist.destroy_process_group()
    return 0


# ------------------------------------------------------------------------------------ the suite
class Suite:
    def __init__(self, args, device):
        self.args, self.device = args, device
        self.results: list[dict] = []
        self.i, self.n = 0, 0

    def progress(self, step: str, msg: str) -> None:
        emit("progress", step=step, i=self.i, n=self.n, msg=msg)

    def run_check(self, step: str, msg: str, fn, check: str, kind: str):
        self.i += 1
        self.progress(step, msg)
        t = time.perf_counter()
        try:
            res = fn()
        except Exception as exc:  # one broken check must not hide the others
            res = {"check": check, "kind": kind, "error": f"{type(exc).__name__}: {exc}".strip()[:2000]}
            traceback.print_exc(file=sys.stderr)
        res.setdefault("seconds", time.perf_counter() - t)
        free_memory(self.device)
        self.results.append(res)
        emit("result", **res)
        return res


def wanted(args, stage: str) -> bool:
    return not args.only or stage in args.only


def run_suite(args) -> int:
    t0 = time.perf_counter()
    started = now_iso()
    if args.device == "cuda" and not torch.cuda.is_available():
        emit("fatal", error="no-cuda", message="--device cuda was asked for, but torch sees no CUDA GPU")
        return 3
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    device = torch.device("cuda", 0) if use_cuda else torch.device("cpu")
    args.device_resolved = device.type
    if device.type == "cuda":
        torch.cuda.set_device(device)
    _INITIAL_TF32.update(read_tf32())
    fp = fingerprint(device)
    emit("result", check="fingerprint", kind="fingerprint", **fp)
    if device.type == "cuda":
        # cuDNN's autotuner costs about a minute per precision for ResNet-50 on an H200: opt-in only
        torch.backends.cudnn.benchmark = bool(args.cudnn_benchmark)
    mem = _usable_bytes(fp["gpus"][0]) if fp.get("gpus") else None
    sizes = plan_sizes(device, args.suite, mem)
    full = args.suite == "full"
    gpu_count = fp.get("gpu_count", 0)

    plan = []  # (stage, step, message, fn, check, kind)
    if wanted(args, "matmul"):
        for name in sizes["matmul_dtypes"]:
            plan.append(("matmul", f"matmul/{name}", f"matmul {name} {sizes['matmul_n']}^3",
                         (lambda nm=name: check_matmul(device, nm, sizes["matmul_n"], sizes["matmul_reps"],
                                                       f"matmul_{nm}")), f"matmul_{name}", "matmul"))
    if wanted(args, "memcpy"):
        plan.append(("memcpy", "memcpy", f"device copy {sizes['memcpy_bytes'] >> 20} MiB",
                     lambda: check_memcpy(device, sizes["memcpy_bytes"], sizes["memcpy_reps"], "memcpy"),
                     "memcpy", "bandwidth"))
    if wanted(args, "probe"):
        no_scaler = args.inject == "fp16-no-scaler"
        plan.append(("probe", "probe/fp16-underflow",
                     "fp16 underflow probe "
                     + ("WITHOUT GradScaler (injected fault)" if no_scaler else "with GradScaler"),
                     lambda: underflow_probe(device, sizes["probe_steps"], not no_scaler, "fp16_underflow_probe"),
                     "fp16_underflow_probe", "probe"))
    for model_name in ("gpt", "resnet"):
        if not wanted(args, model_name):
            continue
        cfg = sizes[model_name]
        for mode in sizes["modes"][model_name]:
            inject = args.inject if (args.inject == "inf" and mode == "bf16" and model_name == "gpt") else None
            check = f"train_{model_name}_{mode}"
            plan.append((model_name, f"{model_name}/{mode}", f"train {cfg['name']} {mode}, {cfg['steps']} steps",
                         (lambda m=model_name, c=cfg, md=mode, inj=inject, ck=check:
                          train_run(device, m, c, md, inject=inj, check=ck,
                                    progress=lambda s: self_progress(ck, s))), check, "train"))
    if full and device.type == "cuda" and wanted(args, "compile"):
        for model_name in ("gpt", "resnet"):
            cfg = sizes[model_name]
            check = f"train_{model_name}_bf16_compile"
            plan.append(("compile", f"{model_name}/bf16-compile", f"train {cfg['name']} bf16 + torch.compile",
                         (lambda m=model_name, c=cfg, ck=check:
                          train_run(device, m, c, "bf16", compiled=True, check=ck,
                                    progress=lambda s: self_progress(ck, s))), check, "train"))
    if full and device.type == "cuda" and gpu_count > 1 and wanted(args, "pergpu"):
        for idx in range(1, gpu_count):
            dev_i = torch.device("cuda", idx)
            plan.append(("pergpu", f"gpu{idx}/matmul", f"GPU {idx}: matmul bf16",
                         (lambda d=dev_i, k=idx: _on(d, lambda: check_matmul(d, "bf16", 8192, 20,
                                                                            f"matmul_bf16_gpu{k}"))),
                         f"matmul_bf16_gpu{idx}", "matmul"))
            plan.append(("pergpu", f"gpu{idx}/memcpy", f"GPU {idx}: device copy",
                         (lambda d=dev_i, k=idx: _on(d, lambda: check_memcpy(d, sizes["memcpy_bytes"], 20,
                                                                            f"memcpy_gpu{k}"))),
                         f"memcpy_gpu{idx}", "bandwidth"))

    suite = Suite(args, device)
    global _SUITE
    _SUITE = suite
    ddp_n = args.ddp_nproc if args.ddp_nproc else (gpu_count if (full and gpu_count > 1) else 0)
    suite.n = len(plan) + (1 if ddp_n > 1 and wanted(args, "ddp") else 0)
    for _stage, step, msg, fn, check, kind in plan:
        suite.run_check(step, msg, fn, check, kind)
    if ddp_n > 1 and wanted(args, "ddp"):
        ref = next((r.get("throughput") for r in suite.results if r.get("check") == "train_gpt_bf16"), None)
        suite.i += 1
        suite.progress("ddp", f"DDP over {ddp_n} processes (torchrun)")
        try:
            suite.results.extend(run_ddp(args, ddp_n, ref, lambda m: suite.progress("ddp", m)))
        except Exception as exc:
            res = {"check": "allreduce", "kind": "allreduce", "error": f"{type(exc).__name__}: {exc}"}
            suite.results.append(res)
            emit("result", **res)
    elif full and device.type == "cuda" and gpu_count <= 1:
        res = {"check": "allreduce", "kind": "allreduce", "skipped": "one GPU: no all-reduce or DDP run"}
        suite.results.append(res)
        emit("result", **res)

    emit("report", schema=SCHEMA, script_version=SCRIPT_VERSION, suite=args.suite, device=device.type,
         inject=args.inject, started_at=started, finished_at=now_iso(), wall_s=time.perf_counter() - t0,
         fingerprint=fp, results=suite.results,
         errors=sum(1 for r in suite.results if r.get("error")))
    return 0


_SUITE = None


def self_progress(step: str, msg: str) -> None:
    if _SUITE is not None:
        _SUITE.progress(step, msg)


def _on(device, fn):
    with torch.cuda.device(device):
        return fn()


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suite", choices=("quick", "full"), default="quick")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--json-lines", action="store_true", help="accepted for clarity; output is always JSON lines")
    p.add_argument("--inject", choices=("inf", "fp16-no-scaler"), default=None,
                   help="plant a fault, to prove the verdict catches it")
    p.add_argument("--only", default="", help="comma-separated stages: " + ",".join(STAGES))
    p.add_argument("--ddp-nproc", type=int, default=0, help="force the DDP stage with N processes (gloo on the CPU)")
    p.add_argument("--cudnn-benchmark", action="store_true", help="let cuDNN autotune convolutions (slow start)")
    p.add_argument("--ddp-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--ref-tok-s", type=float, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.only = {s.strip() for s in args.only.split(",") if s.strip()}
    unknown = args.only - set(STAGES)
    if unknown:
        p.error(f"unknown stage(s): {', '.join(sorted(unknown))}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    claim_stdout()
    if not args.ddp_worker:
        emit("start", script_version=SCRIPT_VERSION, schema=SCHEMA, suite=args.suite, pid=os.getpid(),
             python=sys.executable, python_version=platform.python_version(), started_at=now_iso())
    try:
        import_torch()
    except Exception as exc:
        emit("fatal", error="no-torch", message=f"cannot import torch with {sys.executable}: {exc}")
        return 3
    if args.ddp_worker:
        return ddp_worker(args)
    try:
        return run_suite(args)
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        emit("fatal", error="crash", message=f"{type(exc).__name__}: {exc}")
        return 4


if __name__ == "__main__":
    sys.exit(main())
