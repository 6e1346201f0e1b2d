"""devenv multi-node sanity: run by torchrun on every node of a Slurm allocation (written by devenv; edits are lost).

  python -m torch.distributed.run --nnodes=N --nproc-per-node=P --rdzv-backend=c10d ... multinode.py OUT PHASE

PHASE "multi": the node's facts (machine, GPUs, NICs, InfiniBand), all-reduce correctness, bus bandwidth over
message sizes (nccl-tests' formula: busbw = algbw * 2(n-1)/n), and a DDP GPT-style step's throughput.
PHASE "single": the DDP step alone (the one-node baseline for the scaling efficiency).
NCCL on GPUs, gloo on CPUs. Rank 0 writes OUT (JSON); every rank prints one line, and failures are JSON too.
"""

import json
import os
import socket
import sys
import time
import traceback

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

CPU_SIZES_MB = (1, 8, 32)
GPU_SIZES_MB = (8, 64, 256, 1024)


def node_facts():
    """What this node has for talking to the others (read from sysfs; nothing is installed or asked)."""
    facts = {"hostname": socket.gethostname(), "node": os.environ.get("SLURMD_NODENAME", ""),
             "machine_id": _read("/etc/machine-id"), "boot_id": _read("/proc/sys/kernel/random/boot_id"),
             "gpus": [], "nics": [], "ib": []}
    if torch.cuda.is_available():
        facts["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        facts["nvlink"] = _nvlink_links()
    for nic in sorted(os.listdir("/sys/class/net")) if os.path.isdir("/sys/class/net") else []:
        if nic == "lo":
            continue
        speed = _read(f"/sys/class/net/{nic}/speed")
        facts["nics"].append({"name": nic, "state": _read(f"/sys/class/net/{nic}/operstate"),
                              "speed_mbps": int(speed) if speed and speed.lstrip("-").isdigit() else None})
    ib_root = "/sys/class/infiniband"
    for dev in sorted(os.listdir(ib_root)) if os.path.isdir(ib_root) else []:
        ports = os.path.join(ib_root, dev, "ports")
        for port in sorted(os.listdir(ports)) if os.path.isdir(ports) else []:
            facts["ib"].append({"device": dev, "port": port, "rate": _read(os.path.join(ports, port, "rate")),
                                "state": _read(os.path.join(ports, port, "state")),
                                "link_layer": _read(os.path.join(ports, port, "link_layer"))})
    return facts


def _nvlink_links():
    """Active NVLinks of GPU 0 as `nvidia-smi nvlink -s` prints them (0 when none or no nvidia-smi)."""
    import subprocess

    try:
        out = subprocess.run(["nvidia-smi", "nvlink", "-s", "-i", "0"], capture_output=True, text=True,
                             timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return sum(1 for line in out.splitlines() if "GB/s" in line and "Link" in line and "inActive" not in line)


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def allreduce_correct(device, world, rank):
    """Each rank adds rank+1 (and a seeded random tensor); every rank checks the exact sum."""
    n = 1 << 18
    x = torch.full((n,), float(rank + 1), device=device)
    dist.all_reduce(x)
    want = world * (world + 1) / 2
    ok_const = bool(torch.all(x == want).item())
    gen = torch.Generator().manual_seed(1234 + rank)
    mine = torch.randint(-1000, 1000, (4096,), generator=gen, dtype=torch.int64).to(torch.float32)
    expect = sum(torch.randint(-1000, 1000, (4096,), generator=torch.Generator().manual_seed(1234 + r),
                               dtype=torch.int64).to(torch.float32) for r in range(world))
    y = mine.to(device)
    dist.all_reduce(y)
    ok_random = bool(torch.equal(y.cpu(), expect))
    return {"ok": ok_const and ok_random, "constant_sum": ok_const, "random_sum": ok_random,
            "elements": n + 4096}


def bus_bandwidth(device, world, sizes_mb, sync):
    """nccl-tests' all_reduce_perf measure: algbw = bytes / time, busbw = algbw * 2(n-1)/n (PERFORMANCE.md)."""
    rows = []
    for mb in sizes_mb:
        count = mb * (1 << 20) // 4
        x = torch.ones(count, dtype=torch.float32, device=device)
        for _ in range(3):
            dist.all_reduce(x)
        sync()
        iters = 20 if device.type == "cuda" else 5
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(x)
        sync()
        elapsed = (time.perf_counter() - start) / iters
        t = torch.tensor([elapsed], dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)      # the slowest rank's time, as nccl-tests reports
        seconds = float(t.item())
        size = count * 4
        algbw = size / seconds / 1e9
        rows.append({"bytes": size, "time_us": seconds * 1e6, "algbw_gbs": algbw,
                     "busbw_gbs": algbw * 2 * (world - 1) / world})
    return rows


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab, d, layers, heads, ctx):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        t = idx.shape[1]
        mask = torch.triu(torch.full((t, t), float("-inf"), device=idx.device), diagonal=1)
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.ln(x))


def ddp_step(device, world, rank, sync, steps):
    """A GPT-style DDP training step (weak scaling: the same batch per rank); tokens/s over all ranks."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    gpu = device.type == "cuda"
    vocab, d, layers, heads, ctx, batch = (8192, 512, 4, 8, 256, 8) if gpu else (2048, 128, 2, 4, 64, 4)
    torch.manual_seed(0)
    model = TinyGPT(vocab, d, layers, heads, ctx).to(device)
    ddp = DDP(model, device_ids=[device.index] if gpu else None)
    opt = torch.optim.AdamW(ddp.parameters(), lr=3e-4)
    gen = torch.Generator().manual_seed(100 + rank)
    data = torch.randint(0, vocab, (batch, ctx + 1), generator=gen).to(device)
    losses = []

    def step():
        opt.zero_grad(set_to_none=True)
        logits = ddp(data[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, vocab), data[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        return loss

    for _ in range(2):
        step()
    sync()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(steps):
        losses.append(float(step().item()))
    sync()
    elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64, device=device)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    seconds = float(elapsed.item())
    # the replicas must agree after DDP's gradient all-reduce: compare a parameter checksum across ranks
    check = torch.tensor([sum(float(p.detach().double().sum()) for p in model.parameters())],
                         dtype=torch.float64, device=device)
    low, high = check.clone(), check.clone()
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    params = sum(p.numel() for p in model.parameters())
    return {"steps": steps, "seconds": seconds, "tokens_per_s": world * batch * ctx * steps / seconds,
            "step_ms": seconds / steps * 1000, "params": params, "loss_first": losses[0], "loss_last": losses[-1],
            "replicas_agree": abs(float(high.item()) - float(low.item())) <= 1e-6 * max(1.0, abs(float(high.item())))}


def main():
    out_path, phase = sys.argv[1], sys.argv[2]
    gpu = torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if gpu:
        torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank) if gpu else torch.device("cpu")
    backend = "nccl" if gpu else "gloo"
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    result = {"phase": phase, "backend": backend, "world_size": world, "torch": torch.__version__,
              "cuda": torch.version.cuda, "nnodes": int(os.environ.get("GROUP_WORLD_SIZE", "0") or 0) or None,
              "local_world_size": int(os.environ.get("LOCAL_WORLD_SIZE", "1"))}
    facts = node_facts() if local_rank == 0 else None
    gathered = [None] * world
    dist.all_gather_object(gathered, facts)
    result["nodes"] = [f for f in gathered if f]
    if phase == "multi":
        result["allreduce"] = allreduce_correct(device, world, rank)
        result["busbw"] = bus_bandwidth(device, world, GPU_SIZES_MB if gpu else CPU_SIZES_MB, sync)
    result["ddp"] = ddp_step(device, world, rank, sync, steps=20 if gpu else 5)
    dist.barrier()
    if rank == 0:
        tmp = out_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(result, f)
        os.replace(tmp, out_path)
    print(f"devenv-multinode rank {rank}/{world} {phase} ok", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    try:
        main()
    except Exception as exc:   # one line a person can read, then the trace for the log
        print(f"devenv-multinode error: {type(exc).__name__}: {exc}", flush=True)
        traceback.print_exc()
        sys.exit(1)
