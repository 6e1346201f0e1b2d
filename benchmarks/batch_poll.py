#!/usr/bin/env python3
"""Benchmark: one check batch (checks.host.batch_script) on the test host, as it waits for its probes now
(every 0.02 s for the first half second, then every 0.1 s) vs the loop before (every 0.1 s from the start).

The batch is the Slurm login node's (sinfo, scontrol, sacctmgr, the pyxis probe: what `check` and the
preflight of `up CLUSTER` run), over devenv's own connection to the test sshd, alternated run by run.

    export DEVENV_TESTHOST_DIR=.testhost PYTHONPATH=$PWD
    source .testhost/env && flock /tmp/devenv-it.lock python3 benchmarks/batch_poll.py [--runs 15]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import machine, medians  # noqa: E402
from devenv.checks import host as hc  # noqa: E402

NOW_LOOP = "if [ $f -lt 25 ]"


def before(script: str) -> str:
    """The same batch with the loop before: `sleep 0.1` on every turn."""
    start = script.index("f=0; i=0;")
    end = script.index("done", script.index(NOW_LOOP)) + len("done")
    names_at = script.index("for n in ", start) + len("for n in ")
    names = script[names_at:script.index("; do", names_at)]
    limit = script[script.index("-lt ", start) + 4:script.index(" ]", start)]
    old = (f'i=0; while [ $i -lt {limit} ]; do left=0; for n in {names}; do [ -f "$d/$n.rc" ] || left=1; done; '
           '[ $left = 0 ] && break; sleep 0.1; i=$((i+1)); done')
    return script[:start] + old + script[end:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--host", default="testcluster")
    args = parser.parse_args()
    from devenv.config import hostref
    from devenv.remote.pool import get_connection
    from devenv.services.environments.slurm.check import login_probes

    conn = get_connection(hostref.load_host(args.host))
    conn.run("true")  # connected before the first timing
    now = hc.batch_script(login_probes())
    assert NOW_LOOP in now, "the batch's loop changed: update this benchmark"
    ways = {"batch now (0.02 s, then 0.1 s)": now, "batch before (0.1 s)": before(now)}
    times: dict[str, list[float]] = {way: [] for way in ways}
    for _ in range(args.runs):
        for way, script in ways.items():
            started = time.monotonic()
            result = conn.run(script, timeout=60)
            times[way].append(time.monotonic() - started)
            if not result.ok:
                raise SystemExit(f"{way}: exit {result.exit_code}: {result.stderr[:200]}")
    print(json.dumps({"machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                      "runs": args.runs, "results": medians(times)}, indent=2))


if __name__ == "__main__":
    main()
