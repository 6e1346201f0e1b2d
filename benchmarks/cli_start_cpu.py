#!/usr/bin/env python3
"""Benchmark: the CPU of a devenv command that never leaves this machine, with devenv as a baseline ref has it
(e.g. before remote.pool imported paramiko lazily) against this checkout, in the same run.

Commands (each a fresh `python3 -m devenv ...`, as a user runs it, with its own empty DEVENV_HOME and the
replayed nvidia-smi of tests/replay on PATH): `--help`, `gpus local`, `check local --env cpu`, and the in-memory
backend's `status` (tests/contract/memory_devenv.py: the command the behaviour suite runs most). CPU = user +
sys of the process and its children (os.wait4), the median of --runs, alternated between the two trees. Both
trees are byte-compiled first (as scripts/install and scripts/test --quick leave devenv), so compiling is not
what is compared.

    python3 benchmarks/cli_start_cpu.py [--ref main] [--runs 15]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.harness import machine  # noqa: E402
from benchmarks.pytest_cpu import export  # noqa: E402

COMMANDS = {
    "--help": ["-m", "devenv", "--help"],
    "gpus local": ["-m", "devenv", "gpus", "local"],
    "check local": ["-m", "devenv", "check", "local", "--env", "cpu"],
    "memory status": ["tests/contract/memory_devenv.py", "status"],
}


def cpu_of(tree: Path, argv: list[str], home: Path) -> float:
    """CPU seconds of one command in tree."""
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{tree / 'tests'}", "DEVENV_HOME": str(home),
           "PATH": f"{tree / 'tests' / 'replay'}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.Popen([sys.executable, *argv], cwd=tree, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) not in (0, 1):
        raise SystemExit(f"{argv} in {tree} exited {os.waitstatus_to_exitcode(status)}")
    return usage.ru_utime + usage.ru_stime


def heavy_modules(tree: Path, argv: list[str], home: Path) -> list[str]:
    """The heavy libraries the command imported (a separate run: the probe is not in the timed ones)."""
    probe = ("import atexit, runpy, sys\n"
             "atexit.register(lambda: print('@@', sorted({m.split('.')[0] for m in sys.modules} & "
             "{'paramiko', 'cryptography', 'docker', 'textual', 'yaml'})))\n"
             f"sys.argv = {argv!r}\n"
             "if sys.argv[0] == '-m':\n    sys.argv = ['devenv', *sys.argv[2:]]; "
             "runpy.run_module('devenv', run_name='__main__', alter_sys=True)\n"
             "else:\n    runpy.run_path(sys.argv[0], run_name='__main__')\n")
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{tree / 'tests'}", "DEVENV_HOME": str(home),
           "PATH": f"{tree / 'tests' / 'replay'}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run([sys.executable, "-c", probe], cwd=tree, env=env, capture_output=True, text=True)
    listed = done.stdout.rsplit("@@", 1)[-1].strip().strip("[]").replace("'", "")
    return listed.split(", ") if listed else []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", default="main", help="the baseline: a commit, branch or tag (default main)")
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="devenv-cli-cpu-") as tmp:
        trees = {"baseline": export(args.ref, Path(tmp)), "current": REPO}
        for tree in trees.values():
            subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0", "devenv", "tests"], cwd=tree,
                           check=True, stdout=subprocess.DEVNULL)
        homes = {name: Path(tmp) / f"home-{name}" for name in trees}
        for home in homes.values():
            (home / "profiles" / "hosts").mkdir(parents=True)
            (home / "profiles" / "hosts" / "memhost.yaml").write_text("local: true\nruntime: docker\n")
        cpu: dict[str, dict[str, list[float]]] = {c: {n: [] for n in trees} for c in COMMANDS}
        for _ in range(args.runs):
            for command, argv in COMMANDS.items():
                for name, tree in trees.items():
                    cpu[command][name].append(cpu_of(tree, argv, homes[name]))
        result = {command: {name: {"median_cpu_ms": round(statistics.median(runs) * 1000),
                                   "heavy_modules": heavy_modules(trees[name], COMMANDS[command], homes[name])}
                            for name, runs in by_tree.items()}
                  for command, by_tree in cpu.items()}
    print(json.dumps({"machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                      "ref": args.ref, "runs": args.runs, "results": result}, indent=1))


if __name__ == "__main__":
    main()
