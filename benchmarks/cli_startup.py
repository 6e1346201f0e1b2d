#!/usr/bin/env python3
"""Benchmark: a devenv command's start (the modules `up CLUSTER` imports before its first remote command), with
devenv byte-compiled (as `pip install ./devenv` and scripts/install leave it) vs as source only (an editable
install where PYTHONDONTWRITEBYTECODE is set, as on this kind of machine: every run compiles devenv again).

Both ways run from copies of devenv/ in a temporary folder (one byte-compiled with compileall, one not), with
the same python and the same installed dependencies (whose bytecode is what it is for both), alternated.

    python3 benchmarks/cli_startup.py [--runs 15]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.harness import machine, medians  # noqa: E402

IMPORTS = "import devenv.cli.up_cmd, devenv.remote.pool, devenv.services.environments.slurm.backend"


def copy_of_devenv(into: Path, compiled: bool) -> Path:
    shutil.copytree(REPO / "devenv", into / "devenv", ignore=shutil.ignore_patterns("__pycache__"))
    if compiled:
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(into / "devenv")], check=True)
    return into


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cli-startup-") as tmp:
        ways = {"byte-compiled (as installed)": copy_of_devenv(Path(tmp) / "compiled", True),
                "source only (no bytecode)": copy_of_devenv(Path(tmp) / "source", False)}
        times: dict[str, list[float]] = {way: [] for way in ways}
        for _ in range(args.runs):
            for way, root in ways.items():
                env = dict(os.environ, PYTHONPATH=str(root), PYTHONDONTWRITEBYTECODE="1")
                started = time.perf_counter()
                subprocess.run([sys.executable, "-c", IMPORTS], check=True, env=env, cwd=tmp)
                times[way].append(time.perf_counter() - started)
    print(json.dumps({"machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                      "runs": args.runs, "what": f"python -c '{IMPORTS}'", "results": medians(times)}, indent=2))


if __name__ == "__main__":
    main()
