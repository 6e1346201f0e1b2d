#!/usr/bin/env python3
"""Benchmark: detached runs (issue 23's speed targets) against plain `devenv exec`, in the same run, on the test
host's docker environment (the image present, the environment up before the first timing).

  start        `devenv run testbox --no-follow -- true` (prints the run's id) against `devenv exec testbox --
               true`, alternated: whole CLI processes, what a user waits for. Target: within 1.2x.
  logs -f      a run prints `date +%s.%N` lines; `devenv logs --run ID -f` reads them; the delay from the line's
               own timestamp to its arrival here (the test host is this machine: one clock). Target: < 0.5 s.
  runs (1000)  `devenv runs testbox --json` with 1,000 finished runs in the environment (made by a script there),
               against `exec -- true` again. Target: listing in under a second.

    source .testhost/env && python3 benchmarks/runs_vs_exec.py [--runs 5] [--image devenv-test/pytorch:slim]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.harness import bench_home, byte_compile_devenv, machine, medians  # noqa: E402

ENV_NAME = "bench-runs"
# 1,000 finished runs, as the supervisor leaves them (meta.json, log, exit), made in one go in the environment
MAKE_RUNS = r'''
R=/workspace/.devenv/runs; mkdir -p "$R"; now=$(date +%s); i=0
while [ $i -lt 1000 ]; do
  id=$(printf '%08x%04x' "$((now - 100000 + i))" "$i"); d="$R/$id"; mkdir -p "$d"
  m='{"id":"%s","name":null,"argv":["python","train.py","--seed","%s"],"env":"bench-runs","gpus":null}'
  printf "$m\n" "$id" "$i" > "$d/meta.json"
  printf 'epoch 1 loss 0.5\n' > "$d/log"; printf '0 %s\n' "$((now - 99000 + i))" > "$d/exit"
  i=$((i + 1))
done
'''


def devenv(environ: dict, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "devenv", *args], capture_output=True, text=True, env=environ,
                          cwd=REPO, stdin=subprocess.DEVNULL)
    if check and done.returncode != 0:
        raise RuntimeError(f"devenv {' '.join(args)} exited {done.returncode}: {done.stderr}")
    return done


def timed(environ: dict, *args: str) -> float:
    started = time.perf_counter()
    devenv(environ, *args)
    return time.perf_counter() - started


def follow_delays(environ: dict, lines: int) -> list[float]:
    """Seconds from each line's own timestamp (written by the run) to its arrival through `logs --run -f`."""
    run_id = devenv(environ, "run", "testbox", "--env", ENV_NAME, "--no-follow", "--", "sh", "-c",
                    f"sleep 2; i=0; while [ $i -lt {lines} ]; do date +%s.%N; sleep 0.7; i=$((i+1)); done"
                    ).stdout.split()[-1]
    proc = subprocess.Popen([sys.executable, "-m", "devenv", "logs", "testbox", "--env", ENV_NAME, "--run", run_id,
                             "-f"], stdout=subprocess.PIPE, text=True, env=environ, cwd=REPO)
    delays = []
    assert proc.stdout is not None
    for line in proc.stdout:
        delays.append(time.time() - float(line))
    proc.wait(60)
    return delays


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--image", default="devenv-test/pytorch:slim")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not os.environ.get("DEVENV_SSH_CONFIG"):
        sys.exit("source .testhost/env first")
    byte_compile_devenv()   # as installed (see harness)
    home, environ = bench_home(ENV_NAME, args.image)
    on = ("testbox", "--env", ENV_NAME)
    times: dict[str, list[float]] = {"exec -- true": [], "run -- true (prints id)": [],
                                     "runs --json (1000 finished)": [], "exec -- true (same runs)": []}
    try:
        devenv(environ, "up", *on, "--detach")
        timed(environ, "exec", *on, "--", "true")       # warm-up: host facts, page cache
        for _ in range(args.runs):
            times["exec -- true"].append(timed(environ, "exec", *on, "--", "true"))
            times["run -- true (prints id)"].append(timed(environ, "run", *on, "--no-follow", "--", "true"))
        delays = follow_delays(environ, 10)
        devenv(environ, "runs", *on, "--prune")
        devenv(environ, "exec", *on, "--", "sh", "-c", MAKE_RUNS)
        listed = json.loads(devenv(environ, "runs", *on, "--json").stdout)
        count = len(listed["hosts"]["testbox"]["runs"])
        for _ in range(args.runs):
            times["exec -- true (same runs)"].append(timed(environ, "exec", *on, "--", "true"))
            times["runs --json (1000 finished)"].append(timed(environ, "runs", *on, "--json"))
    finally:
        devenv(environ, "down", *on, "--purge", "--yes", check=False)
        shutil.rmtree(home, ignore_errors=True)
    rows = medians(times)
    ratio = rows["run -- true (prints id)"]["median_s"] / rows["exec -- true"]["median_s"]
    result = {"machine": machine(), "runs": args.runs, "times": rows, "start_ratio": round(ratio, 2),
              "listed": count, "follow_delay_s": {"median": round(statistics.median(delays), 3),
                                                  "max": round(max(delays), 3), "lines": len(delays)}}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{machine()}, {args.runs} runs each, medians:")
    for way, row in rows.items():
        print(f"  {way:<30} {row['median_s']:6.2f} s   {row['runs']}")
    print(f"  run/exec start ratio: {ratio:.2f} (target <= 1.2)")
    print(f"  logs -f delay: median {result['follow_delay_s']['median']} s, max {result['follow_delay_s']['max']} s "
          f"over {len(delays)} lines (target < 0.5 s)")
    print(f"  runs listed: {count}")


if __name__ == "__main__":
    main()
