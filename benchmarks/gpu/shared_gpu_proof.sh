#!/usr/bin/env bash
# Shared-GPU proof on the H200 machine over SSH (see ../shared/gpu-host/README.md): run by the device tool from
# the repo root with .gpuhost carried (GPUHOST_WITH_DEPS="jupyterlab ipykernel" prepare). Every devenv command
# goes through SSH to "gpu-host" (dropbear on 127.0.0.1:2222, host key pinned), as from a user's laptop.
#   1. sanity quick while a bf16 matmul load runs on the GPU: BUSY (exit 5) naming the load's pid
#   2. --allow-busy during the same load: judged anyway, and the report says so
#   3. --gpus 1 during the load: not enough free GPUs (exit 1), naming the busy one
#   4. the same sanity with the GPU idle: PASS (exit 0)
#   5. --wait-idle 120 while a load that ends after ~40 s runs: waits, then PASS
# Outputs land in $OUT (proof.log, one .txt per run, JSON reports).  LOCAL=1 tries it here without a GPU
# (the load and the sanity run then find no GPU: it only proves the script's plumbing).
set -uo pipefail
OUT=${OUT:-/tmp/shared-gpu-proof}; mkdir -p "$OUT"
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"   # step, say, run, devenv, work_in, start_gpuhost, torch_python, host_profile

if [ -z "${LOCAL:-}" ]; then
  start_gpuhost "$OUT/start.log"
else
  export PYTHONPATH=$PWD
fi
TORCH_PY=$(torch_python)
export DEVENV_HOME=/tmp/devenv-home-shared
rm -rf "$DEVENV_HOME"; host_profile gpu-host "$TORCH_PY" cuda
if [ -n "${LOCAL:-}" ]; then   # this machine itself, as gpu-host
  sed -i 's/^ssh:$/local: true/; /^  alias: /d' "$DEVENV_HOME/profiles/hosts/gpu-host.yaml"
fi

# A bf16 matmul loop on GPU 0 for $1 seconds, started with setsid (another "user's" job); its pid in $2.
load() {
  setsid "$TORCH_PY" - "$1" >"$OUT/load-$2.log" 2>&1 <<'PY' &
import sys, time, torch
end = time.time() + float(sys.argv[1])
dev = "cuda" if torch.cuda.is_available() else "cpu"
a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16); b = torch.randn_like(a)
while time.time() < end:
    for _ in range(20):
        c = a @ b
    if dev == "cuda":
        torch.cuda.synchronize()
PY
  echo $! >"$OUT/$2.pid"
}
gone() { while kill -0 "$1" 2>/dev/null; do sleep 0.5; done; }

step "machine"
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader
  "$TORCH_PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  python3 -c 'import devenv; print("devenv", devenv.__version__)'; git log -1 --format='commit %H %s' 2>/dev/null
} 2>&1 | tee -a "$OUT/proof.log"

step "1. sanity quick while a bf16 matmul load runs (expect BUSY, exit 5, naming the load's pid)"
load 240 busy; LOAD=$(cat "$OUT/busy.pid"); say "load pid $LOAD"; sleep 12
devenv check gpu-host --env cuda >"$OUT/check-busy.txt" 2>&1; say "check exit=$?"
grep -E "GPU 0 use|free GPU" "$OUT/check-busy.txt" | tee -a "$OUT/proof.log"
devenv sanity gpu-host --no-save >"$OUT/sanity-busy.txt" 2>&1; code=$?
say "sanity exit=$code"; tail -n 3 "$OUT/sanity-busy.txt" | tee -a "$OUT/proof.log"
grep -q "shared with pid $LOAD " "$OUT/sanity-busy.txt" && say "OK: the verdict names the load's pid $LOAD" \
  || say "MISSING: the load's pid $LOAD is not named"

step "2. --allow-busy during the same load (judged anyway, said so)"
devenv sanity gpu-host --no-save --allow-busy --json >"$OUT/sanity-allow-busy.json" 2>"$OUT/sanity-allow-busy.err"
say "sanity --allow-busy exit=$?"
python3 -c 'import json,sys; v=json.load(open(sys.argv[1]))["verdict"]; print(v["status"].upper(), v["summary"])' \
  "$OUT/sanity-allow-busy.json" 2>&1 | tee -a "$OUT/proof.log"

step "3. --gpus 1 during the load (expect: not enough free GPUs, exit 1)"
devenv sanity gpu-host --no-save --gpus 1 >"$OUT/sanity-gpus1-busy.txt" 2>&1; say "sanity --gpus 1 exit=$?"
cat "$OUT/sanity-gpus1-busy.txt" | tee -a "$OUT/proof.log"
kill "$LOAD" 2>/dev/null; gone "$LOAD"; sleep 2

step "4. the same sanity with the GPU idle (expect PASS, exit 0)"
devenv check gpu-host --env cuda >"$OUT/check-idle.txt" 2>&1; say "check exit=$?"
grep -E "GPU 0 use" "$OUT/check-idle.txt" | tee -a "$OUT/proof.log"
devenv sanity gpu-host --no-save >"$OUT/sanity-idle.txt" 2>&1; say "sanity exit=$?"
tail -n 1 "$OUT/sanity-idle.txt" | tee -a "$OUT/proof.log"

step "5. --wait-idle 120 while a load that ends after ~40 s runs (expect: waits, then PASS)"
load 40 short; LOAD=$(cat "$OUT/short.pid"); say "load pid $LOAD (40 s)"; sleep 8
start=$(date +%s)
devenv sanity gpu-host --no-save --wait-idle 120 >"$OUT/sanity-wait-idle.txt" 2>&1; code=$?
say "sanity --wait-idle exit=$code after $(( $(date +%s) - start )) s"
grep -E "waiting for free GPUs|free: starting" "$OUT/sanity-wait-idle.txt" | tee -a "$OUT/proof.log"
tail -n 1 "$OUT/sanity-wait-idle.txt" | tee -a "$OUT/proof.log"
kill "$LOAD" 2>/dev/null
grep -h "^=== \|exit=\|^OK\|^MISSING" "$OUT/proof.log"
