#!/usr/bin/env bash
# Autostop proof on the H200 machine over SSH (see ../shared/gpu-host/README.md): run by the device tool from the
# repo root with .gpuhost carried (a kit prepared with GPUHOST_WITH_DEPS="jupyterlab ipykernel"). Every devenv
# command goes through SSH to "gpu-host" (dropbear on 127.0.0.1:2222, host key pinned), as from a user's laptop;
# the environment is the bare-host runtime's (Jupyter on the host's loopback, the host's GPU), autostop armed
# with a short window (WINDOW, default 15s).
#   1. no load: `up --autostop` -> the watcher stops the environment once idle for the window (Jupyter ends)
#   2. `up` brings it back (workspace kept); a torch bf16 matmul loop on the GPU (a plain process started with
#      setsid on the host: no session, no devenv run, no kernel, so only the GPU signal can hold the clock)
#      runs; `up --autostop` again -> held by "gpu" for HOLD_WINDOWS windows, Jupyter alive; the load ends ->
#      it stops.
# The watcher's state.json is sampled every 0.5 s into states.jsonl (with the wall time), nvidia-smi every
# second into smi.csv. Outputs land in $OUT (proof.log, summary.json, states.jsonl, smi.csv, status-*.txt).
set -uo pipefail
OUT=${OUT:-/tmp/autostop-proof}; mkdir -p "$OUT"
WINDOW=${WINDOW:-15s}; WINDOW_S=${WINDOW%s}; HOLD_WINDOWS=${HOLD_WINDOWS:-4}
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"   # step, say, run, devenv, work_in, start_gpuhost, torch_python, host_profile

start_gpuhost "$OUT/start.log"
TORCH_PY=$(torch_python)
export DEVENV_HOME=/tmp/devenv-home-autostop DEVENV_OWNER=proof
rm -rf "$DEVENV_HOME"; host_profile gpu-host /tmp/gpu-python cuda
KEY=proof-cuda
STATE=~/.devenv/autostop/$KEY/state.json

# state.json every 0.5 s, one JSON line each with the wall time; nvidia-smi once a second
( while true; do [ -f "$STATE" ] && printf '{"t": "%s", "state": %s}\n' "$(date -u +%T.%N | cut -c1-12)" \
    "$(cat "$STATE" 2>/dev/null || echo null)"; sleep 0.5; done ) >"$OUT/states.jsonl" 2>/dev/null &
SAMPLER=$!
nvidia-smi --query-gpu=timestamp,index,utilization.gpu,memory.used --format=csv -l 1 >"$OUT/smi.csv" 2>&1 &
SMI=$!
trap 'kill $SAMPLER $SMI 2>/dev/null; [ -n "${LOAD:-}" ] && kill $LOAD 2>/dev/null; devenv down gpu-host --yes >/dev/null 2>&1' EXIT

state_is() { python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); sys.exit(0 if s.get("state")==sys.argv[2] else 1)' "$STATE" "$1" 2>/dev/null; }
field() { python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {}, {"s": s}))' "$STATE" "$1" 2>/dev/null; }
wait_state() {   # wait_state STATE BOUND_S
  local end=$(( $(date +%s) + $2 )); until state_is "$1"; do [ "$(date +%s)" -ge "$end" ] && return 1; sleep 0.2; done
}
jupyter_pid() { devenv status gpu-host --json 2>/dev/null | python3 -c 'import json,sys; e=[x for x in json.load(sys.stdin)["environments"] if x["env"]=="cuda"]; print(e[0]["container"] if e and e[0]["state"]=="running" else "")'; }

step "machine"
{ date -u; nvidia-smi -L; "$TORCH_PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  git log -1 --format='commit %H %s' 2>/dev/null; } 2>&1 | tee -a "$OUT/proof.log"

step "1. no load: up --autostop $WINDOW, then nothing"
run devenv up gpu-host --detach --autostop "$WINDOW"; say "up exit=$?"
run devenv exec gpu-host -- sh -c 'echo kept > note'
P1=$(jupyter_pid); say "jupyter pid $P1"
T0=$(date +%s.%N)
if wait_state stopped 180; then T1=$(date +%s.%N); say "stopped after $(python3 -c "print(round($T1-$T0,1))") s: $(field 's["reason"]')"
else say "NOT stopped within 180 s"; fi
for _ in $(seq 1 100); do kill -0 "$P1" 2>/dev/null || break; sleep 0.2; done
kill -0 "$P1" 2>/dev/null && say "jupyter $P1 still alive" || say "jupyter $P1 ended"
devenv status gpu-host >"$OUT/status-1-stopped.txt" 2>&1; cat "$OUT/status-1-stopped.txt" | tee -a "$OUT/proof.log"
cp "$STATE" "$OUT/state-1-stopped.json"
NOLOAD_REASON=$(field 's["reason"]'); NOLOAD_STATE=$(field 's["state"]'); NOLOAD_GPU=$(field 's["signals"]["gpu"]["said"]')

step "2. up brings it back; a torch loop on the GPU (setsid, not a devenv run); up --autostop $WINDOW"
run devenv up gpu-host --detach; say "up exit=$?"
run devenv exec gpu-host -- cat note
setsid "$TORCH_PY" - >"$OUT/load.log" 2>&1 <<'PY' &
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
print("load on", torch.cuda.get_device_name(0), flush=True)
while True:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
PY
LOAD=$!
until grep -q "load on" "$OUT/load.log" 2>/dev/null; do kill -0 $LOAD 2>/dev/null || break; sleep 0.2; done
cat "$OUT/load.log" | tee -a "$OUT/proof.log"
run devenv up gpu-host --detach --autostop "$WINDOW"; say "up exit=$?"
P2=$(jupyter_pid); say "jupyter pid $P2"
T0=$(date +%s)
until [ "$(field 's.get("samples", 0)')" -ge 1 ] 2>/dev/null; do sleep 0.2; [ $(( $(date +%s) - T0 )) -gt 60 ] && break; done
first=$(field 's["samples"]'); interval=$(field 's["interval_s"]')
need=$(python3 -c "print(int($first + $HOLD_WINDOWS * ($WINDOW_S / $interval + 1)))")
say "first sample $first; waiting for sample $need ($HOLD_WINDOWS windows of $WINDOW_S s at $interval s)"
until [ "$(field 's.get("samples", 0)')" -ge "$need" ] 2>/dev/null; do state_is watching || break; sleep 0.5; done
HELD_STATE=$(field 's["state"]'); HELD_BY=$(field '",".join(s["held_by"])'); HELD_GPU=$(field 's["signals"]["gpu"]["said"]')
HELD_SAMPLES=$(field 's["samples"]'); HELD_ACTIVE=$(field 's["active_gpu_s"]')
say "after $HELD_SAMPLES samples: state $HELD_STATE, held by $HELD_BY ($HELD_GPU), active GPU-s $HELD_ACTIVE"
kill -0 "$P2" 2>/dev/null && say "jupyter $P2 alive" || say "jupyter $P2 GONE"
devenv status gpu-host >"$OUT/status-2-held.txt" 2>&1; cat "$OUT/status-2-held.txt" | tee -a "$OUT/proof.log"
devenv status gpu-host --json >"$OUT/status-2-held.json" 2>&1
cp "$STATE" "$OUT/state-2-held.json"
HELD_ALIVE=$(kill -0 "$P2" 2>/dev/null && echo True || echo False)

step "3. the load ends: it stops"
kill $LOAD; wait $LOAD 2>/dev/null; LOAD=
T0=$(date +%s.%N)
if wait_state stopped 180; then T1=$(date +%s.%N); say "stopped $(python3 -c "print(round($T1-$T0,1))") s after the load ended: $(field 's["reason"]')"
else say "NOT stopped within 180 s"; fi
for _ in $(seq 1 100); do kill -0 "$P2" 2>/dev/null || break; sleep 0.2; done
AFTER_ALIVE=$(kill -0 "$P2" 2>/dev/null && echo True || echo False); say "jupyter $P2 alive: $AFTER_ALIVE"
devenv status gpu-host >"$OUT/status-3-stopped.txt" 2>&1; cat "$OUT/status-3-stopped.txt" | tee -a "$OUT/proof.log"
cp "$STATE" "$OUT/state-3-stopped.json"
python3 - "$OUT/summary.json" <<PY
import json, sys
json.dump({"window": "$WINDOW", "no_load": {"state": "$NOLOAD_STATE", "reason": "$NOLOAD_REASON", "gpu": "$NOLOAD_GPU"},
           "with_load": {"state": "$HELD_STATE", "held_by": "$HELD_BY", "gpu": "$HELD_GPU", "samples": "$HELD_SAMPLES",
                         "hold_windows": $HOLD_WINDOWS, "jupyter_alive": $HELD_ALIVE, "active_gpu_s": "$HELD_ACTIVE"},
           "after_load": {"state": "$(field 's["state"]')", "reason": "$(field 's["reason"]')",
                          "jupyter_alive": $AFTER_ALIVE}}, open(sys.argv[1], "w"), indent=1)
PY
cat "$OUT/summary.json" | tee -a "$OUT/proof.log"
step "down"
run devenv down gpu-host --yes
