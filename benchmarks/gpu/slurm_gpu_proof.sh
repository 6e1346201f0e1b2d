#!/usr/bin/env bash
# devenv's Slurm paths on a real GPU (issue 11, "Real parts", last bullet): on the H200 machine, a one-node Slurm
# with gres/gpu from Debian 12 .debs (.slurmkit, built by slurm_kit_prepare.sh), the login node being the
# gpu-host kit's dropbear (../shared/gpu-host: 127.0.0.1:2222, host key pinned). Every devenv command goes over SSH
# to the login node and from there through Slurm, as on a real cluster:
#   0. the machine; can it run Debian 12 binaries at all (ldd, munged, slurmctld, slurmd)? If not: say why, stop.
#   1. Slurm itself: srun --gres=gpu:1 nvidia-smi -L on the compute node, over SSH
#   2. devenv check h200slurm            (the probe job on the compute node sees the H200)
#   3. devenv sanity h200slurm --nodes 1 (NCCL on the GPU through srun + torchrun; devenv's verdict)
#   4. devenv up h200slurm -> a kernel through devenv's relay that sees the GPU; status; down; nothing left
# Run by the device tool from the repo root with .gpuhost and .slurmkit carried:  bash .slurmkit/proof.sh
# Outputs in $OUT: proof.log (the summary), proof.tar.gz (every output), and check.txt, check.json, sanity.json,
# up-kernel.log (8 files at most come back from the device tool).
set -uo pipefail
OUT=${OUT:-/tmp/slurm-gpu-proof}; mkdir -p "$OUT"; W=/tmp/slurm-gpu-proof-work; rm -rf "$W"; mkdir -p "$W"
KIT=$(cd "$(dirname "$0")" && pwd)
. "$KIT/common.sh"   # step, say, run, devenv, work_in, start_gpuhost, torch_python, host_profile
finish() {
  cp -a /var/lib/slurmkit/log "$W/slurm-logs" 2>/dev/null; cp /etc/slurm/slurm.conf /etc/slurm/gres.conf "$W/" 2>/dev/null
  tar -C "$W" -czf "$OUT/proof.tar.gz" . ; cp "$W"/check.txt "$W"/check.json "$W"/sanity.json "$W"/up-kernel.log "$OUT"/ 2>/dev/null; }
trap finish EXIT
T0=$(date +%s)

step "0. machine"
{ date -u; cat /etc/os-release | head -4; uname -r; id; ldd --version | head -1; nproc
  grep MemTotal /proc/meminfo; nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1
  ls -l /dev/nvidia*; ip -br addr 2>/dev/null || cat /proc/net/dev; head -3 /etc/hosts; hostname; command -v sbatch munged slurmd || echo "no Slurm/munge installed before the kit"
} 2>&1 | tee -a "$OUT/proof.log"

# devenv from this branch (the device copies the lead's checkout; the branch's devenv/ travels in the kit)
if [ -f "$KIT/overlay.tar.gz" ]; then tar -xzf "$KIT/overlay.tar.gz" && say "overlay: $(cat OVERLAY_COMMIT 2>/dev/null)"; fi

start_gpuhost "$W/gpuhost-start.log"
tail -n 1 "$W/gpuhost-start.log" | tee -a "$OUT/proof.log"

if [ "${ONLY_UP:-0}" != 1 ]; then   # ONLY_UP=1: the cluster runs already (a second call on a warm machine)
step "0b. Slurm + munge from the Debian 12 debs"
SLURMKIT_ROOT=/ bash "$KIT/start" >"$W/slurmkit-start.log" 2>&1; code=$?
cat "$W/slurmkit-start.log" | tee -a "$OUT/proof.log"
for b in /usr/sbin/munged /usr/sbin/slurmctld-wlm /usr/sbin/slurmd-wlm /usr/bin/srun; do
  echo "ldd $b:"; ldd "$b" 2>&1 | sed 's/^/  /'; done >"$W/ldd.txt"
if [ "$code" != 0 ]; then
  say "the Debian 12 Slurm did not come up (exit $code); ldd of its binaries:"; grep -B1 -E "not found|version" "$W/ldd.txt" | tee -a "$OUT/proof.log"
  exit 1
fi
sinfo 2>&1 | tee -a "$OUT/proof.log"; sinfo --version | tee -a "$OUT/proof.log"

step "1. Slurm on the GPU, over SSH to the login node"
python3 "$KIT/slurm_login_srun.py" 2>&1 | tee -a "$OUT/proof.log"
scontrol show node gpunode | grep -E "Gres|State|CfgTRES" | tee -a "$OUT/proof.log"

fi
export DEVENV_HOME=/tmp/devenv-home-slurm
rm -rf "$DEVENV_HOME"; mkdir -p "$DEVENV_HOME/profiles/hosts" "$DEVENV_HOME/profiles/envs"
cat >"$DEVENV_HOME/profiles/hosts/h200slurm.yaml" <<YAML
description: One-node Slurm on the H200 machine (login node = dropbear on 127.0.0.1:2222; compute node gpunode, gres/gpu)
ssh:
  alias: gpu-host
runtime: slurm
python: /tmp/gpu-python
default_env: h200
slurm:
  partition: gpu
  gpus_per_node: 1
  time: "00:20:00"
YAML
printf 'description: the H200 through Slurm\nimage: devenv/pytorch:unused-on-slurm\ncuda: "13.0"\ntorch: "2.11.0+cu130"\ngpus: 1\njupyter: true\n' \
  >"$DEVENV_HOME/profiles/envs/h200.yaml"

if [ "${ONLY_UP:-0}" != 1 ] && [ "${SKIP_PROVEN:-0}" != 1 ]; then   # SKIP_PROVEN=1: only step 4 after the start
step "2. devenv check h200slurm"
s=$(date +%s.%N); timeout 120 python3 -m devenv check h200slurm >"$W/check.txt" 2>&1; code=$?
say "check exit=$code in $(python3 -c "print(round($(date +%s.%N)-$s,1))") s"; cat "$W/check.txt" | tee -a "$OUT/proof.log"
timeout 120 python3 -m devenv check h200slurm --json >"$W/check.json" 2>"$W/check-json.err"; say "check --json exit=$?"

step "3. devenv sanity h200slurm --nodes 1"
s=$(date +%s.%N); timeout 170 python3 -m devenv sanity h200slurm --nodes 1 --json >"$W/sanity.json" 2>"$W/sanity.err"; code=$?
say "sanity exit=$code in $(python3 -c "print(round($(date +%s.%N)-$s,1))") s"
tail -n 15 "$W/sanity.err" | tee -a "$OUT/proof.log"
python3 - "$W/sanity.json" <<'PY' 2>&1 | tee -a "$OUT/proof.log"
import json, sys
r = json.load(open(sys.argv[1])); v = r.get("verdict", r)
print("verdict:", v.get("status"), "|", v.get("summary", ""))
for c in v.get("checks", []):
    print(" ", c.get("status"), c.get("id"), "|", c.get("title"), "|", c.get("value"))
for n in v.get("not_proven", []):
    print("  not proven:", n)
print("job:", r.get("job_id"), "nodes:", r.get("nodes"))
PY
squeue -a 2>&1 | tee -a "$OUT/proof.log"

fi
step "4. devenv up h200slurm -> a kernel through devenv's relay; status; down"
timeout 150 python3 "$KIT/slurm_kernel_through_relay.py" h200slurm 2>&1 | tee "$W/up-kernel.log" | tee -a "$OUT/proof.log"
devenv status h200slurm 2>&1 | tee -a "$OUT/proof.log"
devenv status h200slurm --json >"$W/status.json" 2>&1
timeout 60 python3 -m devenv down h200slurm 2>&1 | tee -a "$OUT/proof.log"; say "down exit=${PIPESTATUS[0]}"
for i in $(seq 30); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 1; done
say "squeue after down: '$(squeue -h 2>&1)'"
say "jupyter processes after down: $(pgrep -fc 'jupyterlab' || true)"
say "relays after down: $(pgrep -fc -- '--overlap' || true)"
sacct -a 2>/dev/null | head -3 >/dev/null
say "total $(( $(date +%s) - T0 )) s"
grep -h "^=== \|exit=\|verdict:\|kernel:\|job .* node\|URL after\|first answer\|squeue after" "$OUT/proof.log"
