#!/usr/bin/env python3
"""devenv monitor's sampler against a REAL nvidia-smi, on the GPU machine itself (LocalConnection, no SSH):
what the replay cannot show. Runs a bf16 matmul load for part of the window, then prints one JSON object:
samples and throttle reasons seen, the GPU processes with user and container, CPU cost of the streaming
nvidia-smi per sample vs one `nvidia-smi --query-gpu` call per tick, and a --once snapshot.

    PYTHONPATH=$PWD /opt/torch/.venv/bin/python3 benchmarks/monitor_real_gpu.py [--seconds 16]
Uses only the standard library on the devenv side (L0 + services + the local connection).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from devenv.remote.local import LocalConnection
from devenv.services.monitor import HostSampler, gpu_query_command, sample_once

LOAD = """
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
end = time.time() + float(__import__("sys").argv[1])
while time.time() < end:
    for _ in range(20): a @ b
    torch.cuda.synchronize()
"""
TCK = os.sysconf("SC_CLK_TCK")


def stream_pid(marker: str) -> int | None:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if cmd.startswith("nvidia-smi") and marker in cmd:
                return int(entry.name)
    return None


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=16.0)
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args()
    conn = LocalConnection("h200")
    load = subprocess.Popen([args.python, "-c", LOAD, str(args.seconds * 0.5)], stdout=subprocess.DEVNULL)
    sampler = HostSampler("h200", lambda: conn, interval=1.0, process_interval=2.0).start()
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    time.sleep(2)
    pid = stream_pid("-lms 1000")
    ticks0, samples0, t0 = cpu_ticks(pid) if pid else 0, sampler.snapshot().samples, time.monotonic()
    seen_reasons, seen_procs = set(), {}
    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline:
        snap = sampler.snapshot()
        for gpu in snap.gpus:
            seen_reasons.update(gpu.throttle_reasons or ())
        for p in snap.processes:
            seen_procs[p.pid] = p.to_dict()
        time.sleep(0.5)
    snap = sampler.snapshot()
    stream_s = (cpu_ticks(pid) - ticks0) / TCK if pid else None
    stream_samples = snap.samples - samples0
    window = time.monotonic() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    sampler.stop()
    load.wait(60)

    c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    calls, call_wall = 10, []
    for _ in range(calls):
        start = time.monotonic()
        conn.run(gpu_query_command(), timeout=30, check=True)
        call_wall.append(time.monotonic() - start)
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    per_call_s = ((c1.ru_utime + c1.ru_stime) - (c0.ru_utime + c0.ru_stime)) / calls
    once = sample_once(conn)
    gpus = len(snap.gpus) or 1
    print(json.dumps({
        "state": snap.state, "message": snap.message, "gpus": [g.name for g in snap.gpus],
        "driver": snap.driver_version, "window_s": round(window, 1), "samples": stream_samples,
        "gaps": [g.to_dict() for g in snap.gaps], "throttle_reasons_seen": sorted(seen_reasons),
        "processes_seen": list(seen_procs.values()), "fields_missing": list(snap.fields_missing),
        "stream_nvidia_smi_cpu_ms_per_sample":
            round(1000 * stream_s / max(stream_samples, 1), 2) if stream_s is not None else None,
        "sampler_process_cpu_ms_per_sample": round(1000 * ((r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime))
                                                   / max(snap.samples, 1), 2),
        "one_shot_call_cpu_ms": round(1000 * per_call_s, 2),
        "one_shot_call_cpu_ms_per_gpu_sample": round(1000 * per_call_s / gpus, 2),
        "one_shot_call_wall_ms": round(1000 * sorted(call_wall)[len(call_wall) // 2], 1),
        "once": once.to_dict(),
    }, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
