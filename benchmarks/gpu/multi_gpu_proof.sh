#!/usr/bin/env bash
# Multi-GPU proof (issue 15) on the H200 machines over SSH (see ../shared/gpu-host/README.md): run by the device
# tool from the repo root with .gpuhost carried (GPUHOST_WITH_DEPS="jupyterlab ipykernel" prepare). It works on
# the 1-GPU machine (what one GPU can prove) and on the 2-GPU one (what needs two). Every devenv command goes
# through SSH to "gpu-host" (dropbear on 127.0.0.1:2222, host key pinned), as from a user's laptop.
#   1. `up` with `gpus: 1` while GPU 0 is loaded: 2 GPUs -> it picks GPU 1 and torch in the environment sees
#      one H200; 1 GPU -> refused (exit 1) naming the load. Then idle: it picks GPU 0.
#   2. `devenv sanity --suite full` with every GPU (DDP through torchrun with NCCL, all-reduce, each GPU alone)
#   3. the cluster work's multi-node sanity script (sanity/scripts/multinode.py) on this one node with NCCL,
#      started by torchrun by hand (there is no Slurm here), judged by devenv's own multi-node verdict;
#      `devenv monitor --once --json` sampled while its DDP phase runs on every GPU.
# Outputs land in $OUT: proof.log (the summary) and proof.tar.gz (every output).
set -uo pipefail
OUT=${OUT:-/tmp/multi-gpu-proof}; mkdir -p "$OUT"; W=$OUT/work; mkdir -p "$W"
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"   # step, say, run, devenv, work_in, start_gpuhost, torch_python, host_profile
finish() { tar -C "$W" -czf "$OUT/proof.tar.gz" . ; }
trap finish EXIT

start_gpuhost "$W/start.log"
TORCH_PY=$(torch_python)
export DEVENV_HOME=/tmp/devenv-home-multi
rm -rf "$DEVENV_HOME"; mkdir -p "$DEVENV_HOME/profiles/envs"; host_profile gpu-host /tmp/gpu-python one
printf 'image: devenv/pytorch:unused-on-a-bare-host\ngpus: 1\n' >"$DEVENV_HOME/profiles/envs/one.yaml"
GPUS=$(nvidia-smi -L | grep -c '^GPU ')

load() {  # a bf16 matmul loop on GPU $3 for $1 seconds, started with setsid (another user's job); pid in $2
  CUDA_VISIBLE_DEVICES=$3 setsid "$TORCH_PY" - "$1" >"$W/load-$2.log" 2>&1 <<'PY' &
import sys, time, torch
end = time.time() + float(sys.argv[1])
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
while time.time() < end:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
PY
  echo $! >"$W/$2.pid"
}
gone() { while kill -0 "$1" 2>/dev/null; do sleep 0.5; done; }

step "machine"
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1
  nvidia-smi topo -m 2>&1 | head -8
  "$TORCH_PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
  python3 -c 'import devenv; print("devenv", devenv.__version__)'; git log -1 --format='commit %H %s' 2>/dev/null
  echo "GPUs: $GPUS"
} 2>&1 | tee -a "$OUT/proof.log"

step "1. up with gpus: 1 while GPU 0 is loaded"
load 120 busy 0; LOAD=$(cat "$W/busy.pid"); say "load pid $LOAD on GPU 0"; sleep 12
devenv up gpu-host --env one --detach --json >"$W/up-busy.json" 2>"$W/up-busy.err"; code=$?
say "up exit=$code"; grep -E "Picked GPU|busy|Error" "$W/up-busy.err" | head -5 | tee -a "$OUT/proof.log"
if [ "$code" = 0 ]; then
  devenv exec gpu-host --env one -- /tmp/gpu-python -c 'import os, torch; print("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"), "torch sees", torch.cuda.device_count(), torch.cuda.get_device_name(0))' 2>&1 | tee -a "$OUT/proof.log"
  devenv status gpu-host 2>&1 | tee -a "$OUT/proof.log"
  devenv down gpu-host --env one --yes >>"$W/down.log" 2>&1; say "down exit=$?"
fi
kill "$LOAD" 2>/dev/null; gone "$LOAD"; sleep 2
step "1b. up with gpus: 1, every GPU idle (expect GPU 0)"
devenv up gpu-host --env one --detach --json >"$W/up-idle.json" 2>"$W/up-idle.err"; say "up exit=$?"
grep -E "Picked GPU" "$W/up-idle.err" | tee -a "$OUT/proof.log"
devenv exec gpu-host --env one -- /tmp/gpu-python -c 'import os, torch; print("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"), "torch sees", torch.cuda.device_count(), torch.cuda.get_device_name(0))' 2>&1 | tee -a "$OUT/proof.log"
devenv down gpu-host --env one --yes >>"$W/down.log" 2>&1; say "down exit=$?"

step "2. sanity --suite full with all $GPUS GPU(s)"
devenv sanity gpu-host --suite full --no-save --json >"$W/sanity-full.json" 2>"$W/sanity-full.err"; say "sanity exit=$?"
python3 - "$W/sanity-full.json" <<'PY' 2>&1 | tee -a "$OUT/proof.log"
import json, sys
r = json.load(open(sys.argv[1])); v = r["verdict"]
print(v["status"].upper(), v.get("summary", ""))
for c in v.get("checks", []):
    t = (c.get("title") or c.get("name") or "") + " " + str(c.get("value", c.get("detail", "")))
    if any(w in t.lower() for w in ("ddp", "all-reduce", "allreduce", "gpu 1", "each gpu", "nccl", "busbw")):
        print(" ", c.get("status", "").upper(), t[:200])
PY

step "3. multi-node sanity script, one node, $GPUS rank(s), NCCL; then monitor --once --json during a DDP run"
cp devenv/sanity/scripts/multinode.py "$W/multinode.py"
( cd "$W" && "$TORCH_PY" -m torch.distributed.run --nnodes=1 --nproc-per-node="$GPUS" --rdzv-backend=c10d \
    --rdzv-endpoint=127.0.0.1:29611 multinode.py multi.json multi >multi.log 2>&1; echo "multi exit=$?" >>multi.log )
tail -n 2 "$W/multi.log" | tee -a "$OUT/proof.log"
cat >"$W/ddp_load.py" <<'PY'
import os, time, torch, torch.distributed as dist, torch.nn as nn
dist.init_process_group("nccl"); r = int(os.environ["LOCAL_RANK"]); torch.cuda.set_device(r)
m = nn.parallel.DistributedDataParallel(nn.Sequential(*[nn.Linear(4096, 4096) for _ in range(8)]).cuda(), device_ids=[r])
opt = torch.optim.SGD(m.parameters(), lr=1e-4); x = torch.randn(512, 4096, device="cuda"); end = time.time() + 40; n = 0
while time.time() < end:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = m(x).float().pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step(); n += 1
torch.cuda.synchronize(); print(f"ddp rank {r}/{dist.get_world_size()}: {n} steps", flush=True); dist.destroy_process_group()
PY
( cd "$W" && "$TORCH_PY" -m torch.distributed.run --nnodes=1 --nproc-per-node="$GPUS" --rdzv-backend=c10d \
    --rdzv-endpoint=127.0.0.1:29613 ddp_load.py >ddp.log 2>&1; echo "ddp exit=$?" >>ddp.log ) &
RUN=$!
for i in 1 2 3 4 5 6; do sleep 5; devenv monitor gpu-host --once --json >"$W/monitor-$i.json" 2>>"$W/monitor.err"; done
wait $RUN; grep -E "steps|exit=" "$W/ddp.log" | tee -a "$OUT/proof.log"
( cd "$W" && "$TORCH_PY" -m torch.distributed.run --nnodes=1 --nproc-per-node=1 --rdzv-backend=c10d \
    --rdzv-endpoint=127.0.0.1:29612 multinode.py single.json single >single.log 2>&1; echo "single exit=$?" >>single.log )
tail -n 1 "$W/single.log" | tee -a "$OUT/proof.log"
python3 - "$W" <<'PY' 2>&1 | tee -a "$OUT/proof.log"
import json, os, sys
from devenv.sanity.multinode import judge
w = sys.argv[1]
load = lambda p: json.load(open(os.path.join(w, p))) if os.path.exists(os.path.join(w, p)) else None
v = judge(load("multi.json"), load("single.json"), 1)
print("multi-node verdict:", v.status)
for c in v.checks:
    print(" ", c.status, c.title + ":", c.value)
for n in v.not_proven:
    print("  not proven:", n)
json.dump(v.to_dict(), open(os.path.join(w, "multinode-verdict.json"), "w"), indent=1)
best = None
for i in range(1, 7):
    try:
        snap = json.load(open(os.path.join(w, f"monitor-{i}.json")))
    except (OSError, ValueError):
        continue
    for h in snap.get("hosts", []):
        procs = len(h.get("processes") or [])
        for g in h.get("gpus", []):
            print(f"  monitor {i}: GPU {g.get('index')} util {g.get('util_pct')} % mem {g.get('mem_used_mib')} MiB "
                  f"power {g.get('power_w')} W; {procs} process(es) on the host's GPUs")
PY
grep -h "^=== \|exit=\|verdict\|Picked" "$OUT/proof.log"
