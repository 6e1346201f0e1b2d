#!/usr/bin/env python3
"""Benchmark: the CPU time of `scripts/test --quick` (the in-process tests, 2 xdist workers), a baseline ref
against this checkout, in the same run.

CPU = user + sys of the whole process tree (os.wait4's rusage of `bash scripts/test --quick`: every descendant
that was waited for, as `/usr/bin/time` counts it). On a shared machine the wall time says more about the
neighbours than about the suite; the CPU time does not, and on an idle 2-core machine the wall time is about
CPU / 2 plus the waits (subprocesses, sockets) that overlap nothing.

The baseline is exported with `git archive REF` into a temporary folder (nothing in this checkout, its index or
the repository's shared stash is touched); this checkout runs as it is, uncommitted changes included (or, with
--current REF, that ref exported the same way: the checkout can then change during the run). Both run
with the same python, installed packages and environment (PYTHONPATH = the tree), alternated when --runs > 1.

    python3 benchmarks/pytest_cpu.py [--ref main] [--current REF] [--runs 1] [--only current|baseline] [-- ARGS]

--runs 2: the first run of a fresh tree byte-compiles it and pytest rewrites every test module; the second is
what a developer's next run costs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.harness import machine  # noqa: E402


def export(ref: str, into: Path) -> Path:
    """The tree of ref, as committed, under into/tree."""
    tree = into / "tree"
    tree.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", ref], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def run_quick(tree: Path, workers: str, extra: list[str], log: Path | None = None) -> dict:
    """One `bash scripts/test --quick` in tree: wall, user, sys and pytest's summary line."""
    env = {**os.environ, "PYTHONPATH": str(tree), "DEVENV_TEST_WORKERS": workers}
    load = os.getloadavg()[0]
    start = time.monotonic()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(["bash", "scripts/test", "--quick", *extra], cwd=tree, env=env, stdout=out,
                                stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - start
        out.seek(0)
        text = out.read().decode(errors="replace")
    if log:
        log.write_text(text)
    summary = [line for line in text.splitlines() if re.search(r"\d+ (passed|failed)", line)]
    return {"rc": proc.returncode, "wall_s": round(wall, 1), "user_s": round(usage.ru_utime, 1),
            "sys_s": round(usage.ru_stime, 1), "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
            "load_at_start": round(load, 1), "summary": summary[-1].strip("= ") if summary else text[-2000:]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", default="main", help="the baseline: a commit, branch or tag (default main)")
    parser.add_argument("--current", help="run this ref (exported like the baseline) instead of the checkout as it is")
    parser.add_argument("--runs", type=int, default=1, help="runs of each, alternated (default 1)")
    parser.add_argument("--workers", default=os.environ.get("DEVENV_TEST_WORKERS", "2"))
    parser.add_argument("--only", choices=("current", "baseline"), help="run one side only")
    parser.add_argument("--logs", type=Path, help="a folder for each run's output (e.g. with -- --durations=50)")
    parser.add_argument("pytest_args", nargs="*", help="extra arguments for pytest (after --)")
    args = parser.parse_args()
    results: dict[str, list[dict]] = {"baseline": [], "current": []}
    with tempfile.TemporaryDirectory(prefix="devenv-pytest-cpu-") as tmp:
        sides = {"current": REPO}
        if args.current:
            (Path(tmp) / "current").mkdir()
            sides["current"] = export(args.current, Path(tmp) / "current")
        if args.only != "current":
            (Path(tmp) / "baseline").mkdir()
            sides["baseline"] = export(args.ref, Path(tmp) / "baseline")
        if args.only == "baseline":
            del sides["current"]
        for run in range(args.runs):
            for name in sorted(sides):   # baseline first, then current
                log = args.logs / f"{name}-{run}.log" if args.logs else None
                result = run_quick(sides[name], args.workers, args.pytest_args, log)
                results[name].append(result)
                print(f"{name}: {json.dumps(result)}", file=sys.stderr, flush=True)
    print(json.dumps({"machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                      "ref": args.ref, "current": args.current or "the checkout", "workers": args.workers,
                      "PYTHONDONTWRITEBYTECODE": os.environ.get("PYTHONDONTWRITEBYTECODE", ""),
                      "results": {k: v for k, v in results.items() if v}}, indent=1))


if __name__ == "__main__":
    main()
