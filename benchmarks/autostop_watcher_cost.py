"""What the autostop watcher costs the host it runs on: its CPU per sample (its own, and its children's: the
nvidia-smi it starts once per sample), the CPU share at the default 30 s sampling, and its memory (peak RSS).

    python benchmarks/autostop_watcher_cost.py [--seconds 60]

The watcher (devenv/services/environments/autostop_watcher.py, the very file shipped to hosts) runs here with a
bare-host config sampling every second: /proc read whole for sessions, the detached runs folder, and an
nvidia-smi that answers with the H200's recorded utilization (tests/fixtures/nvidia-smi; this machine has no
GPU, so the real nvidia-smi's own cost is measured on the H200 in docs/gpu-proof/, not here). It never stops
(a window of a week); the numbers are read from /proc/PID/stat and /proc/PID/status.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WATCHER = REPO / "devenv" / "services" / "environments" / "autostop_watcher.py"
RECORDED = REPO / "tests" / "fixtures" / "nvidia-smi" / "query-gpu_busy.csv"
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(its own user+system CPU, its waited-for children's), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS, (int(fields[13]) + int(fields[14])) / TICKS


def memory_kb(pid: int) -> dict[str, int]:
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return {k: int(status[k].split()[0]) for k in ("VmRSS", "VmHWM")}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        line = RECORDED.read_text().splitlines()[0].split(", ")
        stub = Path(tmp, "nvidia-smi")
        stub.write_text(f"#!/bin/sh\necho '{line[0]}, {line[8]}'\n")
        stub.chmod(0o755)
        state = Path(tmp, "state.json")
        config = {"env": "bench", "owner": "bench", "idle_s": 7 * 86400, "interval_s": 1.0, "gpu_threshold": 5,
                  "gpus": "all", "nvidia_smi": str(stub), "sessions": {"kind": "host", "uid": "self"},
                  "runs_dir": str(Path(tmp, "ws", ".devenv", "runs")), "jupyter": None,
                  "state_file": str(state), "action_steps": []}
        Path(tmp, "config.json").write_text(json.dumps(config))
        proc = subprocess.Popen([sys.executable, str(WATCHER), str(Path(tmp, "config.json"))])
        try:
            deadline = time.monotonic() + 60
            while not state.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            own0, kids0 = cpu_seconds(proc.pid)
            samples0 = json.loads(state.read_text())["samples"]
            time.sleep(args.seconds)
            own1, kids1 = cpu_seconds(proc.pid)
            last = json.loads(state.read_text())
            mem = memory_kb(proc.pid)
        finally:
            proc.terminate()
            proc.wait(10)
    samples = last["samples"] - samples0
    own, kids = (own1 - own0) / samples, (kids1 - kids0) / samples
    processes = sum(1 for p in os.listdir("/proc") if p.isdigit())
    print(f"{samples} samples in {args.seconds:.0f} s, {processes} processes in /proc, load "
          f"{os.getloadavg()[0]:.1f}, python {sys.version.split()[0]}")
    print("| measure | value |")
    print("|---|---|")
    print(f"| watcher CPU per sample | {own * 1000:.1f} ms |")
    print(f"| nvidia-smi stand-in CPU per sample (a child) | {kids * 1000:.1f} ms |")
    print(f"| CPU share of one core at the default 30 s sampling (watcher) | {own / 30 * 100:.3f} % |")
    print(f"| CPU share of one core at 1 s sampling (a test's window) | {own * 100:.2f} % |")
    print(f"| RSS now / peak | {mem['VmRSS'] / 1024:.1f} MB / {mem['VmHWM'] / 1024:.1f} MB |")
    print(f"| signals of the last sample | {json.dumps(last['signals'])} |")


if __name__ == "__main__":
    main()
