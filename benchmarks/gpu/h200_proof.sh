#!/usr/bin/env bash
# The GPU paths, run for real on the H200 machine over SSH (see ../shared/gpu-host/README.md): the device tool
# runs this from the repo root with .gpuhost carried. Every devenv command goes through SSH to "gpu-host"
# (dropbear on 127.0.0.1:2222, host key pinned), exactly as a user's laptop would reach a GPU box.
#   SUITE=quick|full (sanity), GPUS (expected GPU count, for the note). Outputs land in $OUT.
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"   # step, say, run, devenv, work_in, start_gpuhost, torch_python, host_profile
work_in gpu-proof proof.tar.gz   # everything lands in /tmp/gpu-proof, then one tarball goes back
SUITES=${SUITES:-quick}

start_gpuhost "$OUT/start.log"
TORCH_PY=$(torch_python)
export DEVENV_HOME=/tmp/devenv-home
host_profile gpu-host "$TORCH_PY" cuda

step "machine"
run nvidia-smi -L; run "$TORCH_PY" -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.device_count())'

step "devenv check gpu-host --env cuda (CUDA 12.8 / torch cu128 environment)"
run devenv check gpu-host --env cuda; echo "exit=$?" | tee -a "$OUT/proof.log"
devenv check gpu-host --env cuda --json >"$OUT/check.json" 2>/dev/null

for suite in $SUITES; do
  step "devenv sanity gpu-host --suite $suite"
  start=$(date +%s%N)
  devenv sanity gpu-host --suite "$suite" >"$OUT/sanity-$suite.txt" 2>&1; code=$?
  echo "exit=$code, command-to-verdict: $(( ($(date +%s%N) - start) / 1000000 )) ms" | tee -a "$OUT/proof.log"
  tail -n 40 "$OUT/sanity-$suite.txt" | tee -a "$OUT/proof.log"
done
step "a broken run must fail: fp16 without GradScaler, and an injected inf"
devenv sanity gpu-host --inject fp16-no-scaler --only probe --no-save >"$OUT/sanity-broken-fp16.txt" 2>&1; echo "fp16-no-scaler exit=$?" | tee -a "$OUT/proof.log"
tail -n 4 "$OUT/sanity-broken-fp16.txt" | tee -a "$OUT/proof.log"
devenv sanity gpu-host --inject inf --only gpt --no-save >"$OUT/sanity-broken-inf.txt" 2>&1; echo "inf exit=$?" | tee -a "$OUT/proof.log"
tail -n 4 "$OUT/sanity-broken-inf.txt" | tee -a "$OUT/proof.log"

step "devenv monitor gpu-host --once --json during a training"
"$TORCH_PY" - <<'PY' &
import time, torch
m = torch.nn.Sequential(*[torch.nn.Linear(8192, 8192) for _ in range(4)]).cuda()
opt = torch.optim.AdamW(m.parameters()); x = torch.randn(4096, 8192, device="cuda")
end = time.time() + 25
while time.time() < end:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = m(x).float().pow(2).mean()
    loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
torch.cuda.synchronize()
PY
train=$!
sleep 10
devenv monitor gpu-host --once --json >"$OUT/monitor.json" 2>&1; echo "monitor exit=$?" | tee -a "$OUT/proof.log"
devenv monitor gpu-host --once 2>&1 | tee -a "$OUT/proof.log"
wait $train

step "devenv up gpu-host (host runtime): Jupyter on the host's loopback, a kernel through devenv's tunnel"
"$TORCH_PY" -m pip install -q --no-index --find-links .gpuhost/whl jupyter-server ipykernel >"$OUT/pip.log" 2>&1 \
  || tail -n 5 "$OUT/pip.log"
run devenv up gpu-host --detach; echo "up exit=$?" | tee -a "$OUT/proof.log"
devenv status gpu-host --json >"$OUT/status.json" 2>&1
python3 benchmarks/gpu/kernel_through_tunnel.py gpu-host 2>&1 | tee -a "$OUT/proof.log"
run devenv down gpu-host --yes; echo "down exit=$?" | tee -a "$OUT/proof.log"
cp -r "$DEVENV_HOME/state" "$OUT/state" 2>/dev/null || true
grep -h "^=== \|exit=" "$OUT/proof.log"
