#!/usr/bin/env python3
"""Benchmark: one new connection to a port on a Slurm job's node, through the login node, two ways:
devenv's relay (`srun --overlap --jobid J` + the stdio relay in python on the node: what each tunnel
connection after the first starts) vs `ssh -W 127.0.0.1:PORT NODE` run on the login node (what an SSH hop to
the compute node costs, where a cluster lets users in: issue 11's other route).

The job runs a small HTTP server on its node's loopback. Each way opens an exec channel on devenv's own SSH
connection to the login node, sends one GET and times the first byte of the answer; the ways alternate run by
run. On the test cluster the nodes are this machine, so the SSH hop is the test sshd with the test host's key.

    export DEVENV_TESTHOST_DIR=.testhost PYTHONPATH=$PWD
    source .testhost/env && flock /tmp/devenv-it.lock python3 benchmarks/relay_connect.py [--runs 15]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import free_port, machine, medians  # noqa: E402
from devenv.cluster import slurm_job  # noqa: E402

REQUEST = b"GET / HTTP/1.0\r\nHost: x\r\n\r\n"


def first_byte(conn, command: str) -> float:
    """Seconds from opening the command's channel to the first byte of the HTTP answer through it."""
    from devenv.remote.relay import _start_command

    started = time.monotonic()
    channel = _start_command(conn, command)
    try:
        channel.sendall(REQUEST)
        data = channel.recv(1)
        if not data:
            raise SystemExit(f"no answer through: {command}\n{channel.recv_stderr(4000).decode(errors='replace')}")
        return time.monotonic() - started
    finally:
        channel.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--host", default="testcluster")
    parser.add_argument("--node", default="node1")
    args = parser.parse_args()
    from devenv.config import hostref
    from devenv.remote.pool import get_connection

    host = hostref.load_host(args.host)
    conn = get_connection(host)
    conn.run("true")  # connected before the first timing
    port = free_port()
    job = subprocess.run(["sbatch", "--parsable", "--job-name=devenv-bench-relay", "-N1", f"-w{args.node}",
                          "--time=5", "--wrap", f"exec {shlex.quote(host.python)} -m http.server {port} "
                          "--bind 127.0.0.1"], capture_output=True, text=True, check=True).stdout.strip()
    try:
        relay = slurm_job.relay_command(job, args.node, host.python, port)
        testhost = Path(os.environ.get("DEVENV_TESTHOST_DIR", ".testhost")).resolve()
        ssh_hop = " ".join(shlex.quote(w) for w in [
            "ssh", "-F", str(testhost / "ssh_config"), "-o", f"UserKnownHostsFile={testhost / 'known_hosts'}",
            "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-W", f"127.0.0.1:{port}", "testbox"])
        deadline = time.monotonic() + 60
        while True:     # the job's server is up once the relay gets an answer
            try:
                first_byte(conn, relay)
                break
            except SystemExit:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        ways = {"srun --overlap relay (devenv)": relay, "ssh -W from the login node": ssh_hop}
        times: dict[str, list[float]] = {way: [] for way in ways}
        for _ in range(args.runs):
            for way, command in ways.items():
                times[way].append(first_byte(conn, command))
    finally:
        subprocess.run(["scancel", job], check=False)
    print(json.dumps({"machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                      "runs": args.runs, "results": medians(times)}, indent=2))


if __name__ == "__main__":
    main()
