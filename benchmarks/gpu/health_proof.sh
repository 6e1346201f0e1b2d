#!/usr/bin/env bash
# Issue 26 on the H200 machine over SSH (../shared/gpu-host): the health section of `check` (idle, under load, and
# as a normal user who cannot read the kernel log), `sanity` beside an idle co-tenant holding 60 GiB (speed judged,
# co-tenant named), `sanity --dcgm` on a host without DCGM, and devenv's occupancy frames with pmon recorded for the
# tests. The device tool runs this from the repo root with .gpuhost carried; everything lands in $OUT.
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"   # step, say, run, devenv, work_in, start_gpuhost, torch_python, host_profile
work_in health-proof

start_gpuhost "$OUT/start.log"
TORCH_PY=$(torch_python)
export DEVENV_HOME=/tmp/devenv-home
for h in gpu-host gpu-user; do host_profile "$h" "$TORCH_PY" cuda; done
# a normal user on the same sshd (kernel.dmesg_restrict=1 there: the kernel log is root's)
useradd -m devuser >/dev/null 2>&1; mkdir -p ~devuser/.ssh; cp ~/.ssh/authorized_keys ~devuser/.ssh/
chown -R devuser ~devuser/.ssh; chmod 700 ~devuser/.ssh
printf '\nHost gpu-user\n  HostName 127.0.0.1\n  Port 2222\n  User devuser\n  IdentityFile %s/.ssh/id_ed25519\n' "$HOME" >>~/.ssh/config
frame() { "$TORCH_PY" -c 'from devenv.gpu.occupancy import occupancy_script; print(occupancy_script(pmon=True))' | sh; }

step "check gpu-host (idle)"
devenv check gpu-host >"$OUT/check-idle.txt" 2>&1; echo "exit=$?" | tee -a "$OUT/proof.log"
grep -E "health|Xid|UNHEALTHY|ready" "$OUT/check-idle.txt" | tee -a "$OUT/proof.log"
devenv check gpu-host --json >"$OUT/check-idle.json" 2>/dev/null

step "check gpu-user (a normal user: dmesg refused)"
devenv check gpu-user >"$OUT/check-user.txt" 2>&1; echo "exit=$?" | tee -a "$OUT/proof.log"
grep -E -A1 "Xid" "$OUT/check-user.txt" | tee -a "$OUT/proof.log"

step "an idle co-tenant: 60 GiB held, no kernels"
"$TORCH_PY" -c "import torch,time; x=torch.empty(60*2**30,dtype=torch.uint8,device='cuda'); x.fill_(1); torch.cuda.synchronize(); print('held',flush=True); time.sleep(600)" >"$OUT/cotenant.log" 2>&1 &
CO=$!
for i in $(seq 300); do grep -q held "$OUT/cotenant.log" && break; sleep 0.2; done
echo "co-tenant pid $CO" | tee -a "$OUT/proof.log"
{ echo "== frame, co-tenant alone"; frame; } >"$OUT/frames.txt" 2>&1

step "sanity gpu-host --dcgm beside the idle co-tenant"
start=$(date +%s%N)
devenv sanity gpu-host --dcgm --no-save >"$OUT/sanity-cotenant.txt" 2>&1; code=$?
echo "exit=$code, command-to-verdict: $(( ($(date +%s%N) - start) / 1000000 )) ms" | tee -a "$OUT/proof.log"
tail -n 12 "$OUT/sanity-cotenant.txt" | tee -a "$OUT/proof.log"
devenv sanity gpu-host --no-save --json >"$OUT/sanity-cotenant.json" 2>"$OUT/sanity-cotenant-json.err"
echo "json exit=$?" | tee -a "$OUT/proof.log"

step "a load beside the co-tenant: frames and check under load"
"$TORCH_PY" -c "
import torch,time
a=torch.randn(8192,8192,device='cuda',dtype=torch.bfloat16); print('load',flush=True); t=time.time()
while time.time()-t<40:
    for _ in range(20): b=a@a
    torch.cuda.synchronize()" >"$OUT/load.log" 2>&1 &
LOAD=$!
for i in $(seq 300); do grep -q load "$OUT/load.log" && break; sleep 0.2; done; sleep 2
echo "load pid $LOAD" | tee -a "$OUT/proof.log"
for k in 1 2 3; do { echo "== frame $k, co-tenant + load"; frame; } >>"$OUT/frames.txt" 2>&1; sleep 1; done
devenv check gpu-host >"$OUT/check-load.txt" 2>&1; echo "check under load exit=$?" | tee -a "$OUT/proof.log"
grep -E "health|UNHEALTHY|ready" "$OUT/check-load.txt" | tee -a "$OUT/proof.log"
kill $LOAD $CO 2>/dev/null; wait 2>/dev/null
step "done"
