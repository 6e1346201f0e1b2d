#!/usr/bin/env bash
# Issue 23 (detached runs) on the H200 machine over SSH (../shared/gpu-host): a run that trains on the GPU,
# started detached, watched with `runs` and `logs` (`logs -f` across a killed SSH connection), `--wait`'s exit
# codes, a cancel, a supervisor SIGKILLed (-> lost, its log kept) and `--then down`. The device tool runs this
# from the repo root with .gpuhost and this script's folder carried; everything lands in $OUT.
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"   # step, say, run, devenv, work_in, start_gpuhost, torch_python, host_profile
work_in runs-proof
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

start_gpuhost "$OUT/start.log"
GPY=/tmp/gpu-python; [ -x "$GPY" ] || GPY=/opt/torch/.venv/bin/python3
export DEVENV_HOME=/tmp/devenv-home
host_profile gpu-host "$GPY" cuda
nvidia-smi -L | tee -a "$OUT/proof.log"

# the training: a small GPT-style model in bf16 on the GPU, one line per 50 steps, ~45 s
cat >/tmp/train_runs.py <<'PY'
import time, torch, torch.nn as nn
torch.manual_seed(0)
dev = "cuda"
print("device", torch.cuda.get_device_name(0), "torch", torch.__version__, flush=True)
layer = nn.TransformerEncoderLayer(d_model=1024, nhead=16, dim_feedforward=4096, batch_first=True)
model = nn.Sequential(nn.Embedding(8192, 1024), nn.TransformerEncoder(layer, 6), nn.Linear(1024, 8192)).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
data = torch.randint(0, 8192, (64, 257), device=dev)  # a fixed batch: the loss must fall (memorised)
t0 = time.time(); step = 0
while time.time() - t0 < 45:
    x, y = data[:, :-1], data[:, 1:]
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
    opt.zero_grad(set_to_none=True); loss.backward(); opt.step(); step += 1
    if step % 50 == 0:
        torch.cuda.synchronize()
        print(f"step {step} loss {loss.item():.4f} {step * 64 * 256 / (time.time() - t0):.0f} tok/s "
              f"mem {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB", flush=True)
print(f"done {step} steps, final loss {loss.item():.4f}", flush=True)
PY

step "devenv run gpu-host --name train --no-follow -- $GPY -u /tmp/train_runs.py (makes the environment first)"
t=$(date +%s%N)
ID=$(devenv run gpu-host --name train --no-follow -- "$GPY" -u /tmp/train_runs.py 2>"$OUT/run-train.err"); code=$?
say "exit=$code id=$ID in $(ms "$t") ms"; cat "$OUT/run-train.err" | tee -a "$OUT/proof.log"
for i in $(seq 300); do devenv logs gpu-host --run "$ID" 2>/dev/null | grep -q '^step' && break; sleep 0.5; done

step "devenv runs gpu-host (training running), nvidia-smi"
t=$(date +%s%N); devenv runs gpu-host 2>&1 | tee -a "$OUT/proof.log"; say "runs in $(ms "$t") ms"
devenv runs gpu-host --json >"$OUT/runs-running.json" 2>&1
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv 2>&1 | tee -a "$OUT/proof.log"
nvidia-smi --query-gpu=utilization.gpu,memory.used,power.draw --format=csv 2>&1 | tee -a "$OUT/proof.log"

step "devenv logs gpu-host --run train (so far)"
devenv logs gpu-host --run train 2>&1 | tee "$OUT/logs-partial.txt" | tee -a "$OUT/proof.log"

step "devenv logs gpu-host --run $ID -f, with its SSH connection killed twice on the way"
devenv logs gpu-host --run "$ID" -f >"$OUT/logs-follow.txt" 2>"$OUT/logs-follow.err" &
FOL=$!
MASTER=$(cat /tmp/dropbear/pid 2>/dev/null || pgrep -o -x dropbear)
for k in 1 2; do
  sleep 8
  kids=$(pgrep -P "$MASTER" 2>/dev/null | tr '\n' ' ')
  say "kill $k: dropbear session processes $kids (master $MASTER)"
  [ -n "$kids" ] && kill -9 $kids
done
wait "$FOL"; say "logs -f exit=$?"
cat "$OUT/logs-follow.err" | tee -a "$OUT/proof.log"
devenv logs gpu-host --run "$ID" >"$OUT/logs-final.txt" 2>&1
if cmp -s "$OUT/logs-follow.txt" "$OUT/logs-final.txt"; then say "logs -f == logs (byte for byte): nothing lost or repeated"
else say "logs -f differs from logs:"; diff "$OUT/logs-follow.txt" "$OUT/logs-final.txt" | head | tee -a "$OUT/proof.log"; fi
tail -n 4 "$OUT/logs-final.txt" | tee -a "$OUT/proof.log"
devenv runs gpu-host 2>&1 | tee -a "$OUT/proof.log"

step "--wait exit codes"
devenv run gpu-host --wait --no-follow -- "$GPY" -c 'import sys, torch; print(torch.cuda.is_available()); sys.exit(3)' \
  >"$OUT/wait3.txt" 2>&1; say "python exits 3: devenv run --wait exit=$?"
devenv run gpu-host --wait --no-follow -- /no/such/program >"$OUT/wait127.txt" 2>&1; say "command not found: exit=$?"
devenv run gpu-host --wait --no-follow -- true >"$OUT/wait0.txt" 2>&1; say "true: exit=$?"
cat "$OUT/wait3.txt" "$OUT/wait127.txt" | tee -a "$OUT/proof.log"

step "cancel: a GPU process tree (sh -> python holding GPU memory)"
CID=$(devenv run gpu-host --name tree --no-follow -- sh -c "$GPY -c 'import torch,time; x=torch.ones(2**28,device=\"cuda\"); print(\"held\",flush=True); time.sleep(600)' & wait" 2>/dev/null)
for i in $(seq 200); do devenv logs gpu-host --run "$CID" 2>/dev/null | grep -q held && break; sleep 0.5; done
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader 2>&1 | tee -a "$OUT/proof.log"
devenv cancel gpu-host "$CID" --grace 5 2>&1 | tee -a "$OUT/proof.log"
sleep 1; say "GPU processes after cancel: $(nvidia-smi --query-compute-apps=pid --format=csv,noheader | wc -l)"

step "lost: the supervisor SIGKILLed (as a host reboot or container restart would end it)"
LID=$(devenv run gpu-host --name lost --no-follow -- sh -c 'echo before; sleep 600' 2>/dev/null)
for i in $(seq 100); do devenv logs gpu-host --run "$LID" 2>/dev/null | grep -q before && break; sleep 0.2; done
PIDF=$(find / -xdev -path "*/.devenv/runs/$LID/pid" 2>/dev/null | head -1)
read -r SUP _ PG _ <"$PIDF"; say "supervisor $SUP, group $PG ($PIDF)"
kill -9 "$SUP"; kill -9 -- "-$PG" 2>/dev/null
devenv runs gpu-host 2>&1 | tee -a "$OUT/proof.log"
devenv logs gpu-host --run "$LID" 2>&1 | tee -a "$OUT/proof.log"; say "logs of the lost run exit=${PIPESTATUS[0]}"

step "runs --json, then --then down"
devenv runs gpu-host --json >"$OUT/runs-final.json" 2>&1
devenv run gpu-host --then down --wait --no-follow -- sh -c 'echo last' >"$OUT/then-down.txt" 2>&1; say "--then down exit=$?"
sleep 2; devenv status gpu-host 2>&1 | tee -a "$OUT/proof.log"
say "GPU processes at the end: $(nvidia-smi --query-compute-apps=pid --format=csv,noheader | wc -l)"
step "done"
