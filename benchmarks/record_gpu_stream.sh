#!/usr/bin/env bash
# Record what devenv monitor's replay and benchmark are fed with, on a real GPU machine (run from the repo root):
#   OUT=/some/dir bash benchmarks/record_gpu_stream.sh [python-with-torch]
# Writes: a full-field `-lms 500` stream spanning idle -> matmul load -> idle, the compute-apps stream, the cost
# of one nvidia-smi call vs the CPU time of a streaming nvidia-smi, and how a GPU process maps to user/cgroup.
set -u
PY=${1:-/opt/torch/.venv/bin/python3}
OUT=${OUT:?set OUT}
FIELDS=index,uuid,name,driver_version,pci.bus_id,memory.total,memory.used,memory.free,utilization.gpu,utilization.memory,temperature.gpu,power.draw,power.limit,clocks.sm,clocks.max.sm,clocks.mem,pcie.link.gen.current,pcie.link.width.current,compute_cap,ecc.errors.uncorrected.volatile.total,clocks_event_reasons.active,fan.speed,pstate,mig.mode.current,persistence_mode
APPS=pid,process_name,used_memory,gpu_uuid
{ nvidia-smi --version; uname -a; nproc; } >"$OUT/machine.txt" 2>&1

# 1. streams: start both, load the GPU from t=4 s to t=12 s, stop at t=16 s
nvidia-smi --query-gpu=$FIELDS --format=csv,noheader,nounits -lms 500 >"$OUT/stream_full_lms500.csv" 2>"$OUT/stream_full.err" &
GPID=$!
nvidia-smi --query-compute-apps=$APPS --format=csv,noheader,nounits -lms 1000 >"$OUT/compute-apps_lms1000.txt" 2>"$OUT/compute-apps_lms.err" &
APID=$!
sleep 4
"$PY" - <<'PY' >"$OUT/load.txt" 2>&1 &
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
end = time.time() + 8
while time.time() < end:
    for _ in range(20): a @ b
    torch.cuda.synchronize()
print("done")
PY
LPID=$!
sleep 3
{ echo "load pid $LPID"; ps -o pid=,user=,comm= -p "$LPID"; cat /proc/$LPID/cgroup; } >"$OUT/process_owner.txt" 2>&1
nvidia-smi --query-compute-apps=$APPS --format=csv,noheader,nounits >"$OUT/compute-apps_during.csv" 2>&1
wait $LPID
sleep 4
# CPU time the streaming nvidia-smi used over ~16 s (utime+stime in clock ticks)
awk '{print "stream utime+stime ticks:", $14+$15}' /proc/$GPID/stat >"$OUT/stream_cpu.txt"
getconf CLK_TCK >>"$OUT/stream_cpu.txt"
kill $GPID $APID
wc -l "$OUT/stream_full_lms500.csv" >>"$OUT/stream_cpu.txt"

# 2. cost of one nvidia-smi call (what a once-per-tick sampler pays)
/usr/bin/time -f "%e s wall %U user %S sys" -o "$OUT/one_call_time.txt" -a bash -c \
  "for i in \$(seq 10); do nvidia-smi --query-gpu=$FIELDS --format=csv,noheader,nounits >/dev/null; done" 2>&1
"$PY" -c "import pynvml; print('pynvml', pynvml.__file__)" >"$OUT/nvml.txt" 2>&1
"$PY" -c "import nvidia_smi" >>"$OUT/nvml.txt" 2>&1
ls "$OUT"
