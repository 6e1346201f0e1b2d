#!/usr/bin/env python3
"""Benchmark: an environment job on a Slurm cluster, devenv vs the manual way, on the test host's cluster.

Each timing runs from the start until a Jupyter URL on THIS machine answers an authenticated request
(/api/status with the token), with an empty queue:
  devenv CLI  `devenv up CLUSTER` as a user runs it (a new process of a byte-compiled devenv: imports, the
           preflight on the login node, the python check, files with the 0600 token, sbatch, bounded wait,
           Jupyter probed on the node, the srun --overlap relay tunnel it holds), until the URL it prints answers.
  devenv service  the same at the SERVICE level, in this process: SlurmEnvironments.up() (no preflight; with
           relay_ahead, as the CLI's held `up`) + the relay tunnel, then the URL.
  manual   what a user does by hand: ssh + sbatch a script that starts Jupyter on the node (token on its command
           line), poll `squeue` over ssh until RUNNING, `ssh -N -L` through the login node to the node's address
           (scontrol NodeAddr), poll the URL.
Same python, same Jupyter, same partition; the job is cancelled between runs; medians of --runs.

    export DEVENV_TESTHOST_DIR=.testhost PYTHONPATH=$PWD
    flock /tmp/devenv-it.lock python3 benchmarks/slurm_up_vs_manual.py [--python /path/to/venv/bin/python]

(default python: the one of the test host's `testcluster` profile, which testhost/setup makes.)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.harness import byte_compile_devenv, free_port  # noqa: E402
from benchmarks.harness import wait_answering as _wait_answering  # noqa: E402

ENV_NAME = "bench-slurm"


def wait_answering(url: str, token: str) -> None:
    _wait_answering(url, token, timeout=300, interval=0.1)


def ssh(testhost: Path, *words: str, **kw) -> subprocess.CompletedProcess:
    argv = ["ssh", "-F", str(testhost / "ssh_config"), "-o", f"UserKnownHostsFile={testhost / 'known_hosts'}",
            "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "testbox", *words]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, **kw)


def devenv_once(python: str) -> float:
    from devenv.config import hostref
    from devenv.config.profiles import load_env
    from devenv.remote.pool import get_connection
    from devenv.remote.relay import CommandTunnel
    from devenv.remote.tunnels import Forward
    from devenv.runtimes.host_runtime import HostRuntime
    from devenv.schedulers.slurm import Slurm
    from devenv.services.environments.contract import UpOptions
    from devenv.services.environments.slurm.backend import SlurmEnvironments

    started = time.monotonic()
    host = hostref.load_host("benchcluster")
    conn = get_connection(host)
    svc = SlurmEnvironments(host, conn, Slurm(conn, host.name), HostRuntime(conn, host))
    access = svc.up(load_env(ENV_NAME), options=UpOptions(relay_ahead=True)).jupyter  # as the CLI's held `up`
    assert access is not None and access.relay is not None
    relay = access.relay
    forward = Forward("jupyter", "127.0.0.1", access.port, free_port())
    tunnel = CommandTunnel(conn, [forward], lambda f: relay, watch=access.ended,
                           spares={"jupyter": access.spare} if access.spare is not None else None)
    try:
        wait_answering(f"http://127.0.0.1:{forward.local_port}/api/status", access.token)
        elapsed = time.monotonic() - started
    finally:
        tunnel.close()
        svc.down(ENV_NAME)
    return elapsed


def devenv_cli_once() -> float:
    """`devenv up benchcluster` in a new process, until the URL it prints answers; then Ctrl-C and down."""
    import re
    import signal

    started = time.monotonic()
    up = subprocess.Popen([sys.executable, "-m", "devenv", "up", "benchcluster"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, cwd=REPO)
    try:
        url = None
        for line in up.stdout:
            found = re.search(r"http://127\.0\.0\.1:\d+/lab\?token=\S+", line)
            if found:
                url = found.group(0)
                break
        if url is None:
            raise RuntimeError(f"devenv up printed no URL: {up.stderr.read()}")
        base, token = url.split("/lab?token=")
        wait_answering(f"{base}/api/status", token)
        elapsed = time.monotonic() - started
    finally:
        up.send_signal(signal.SIGINT)
        up.wait(60)
        subprocess.run([sys.executable, "-m", "devenv", "down", "benchcluster"], capture_output=True, timeout=120,
                       cwd=REPO)
    return elapsed


MANUAL_SCRIPT = """#!/bin/bash
#SBATCH --job-name=manual-jupyter
#SBATCH --partition=debug
#SBATCH --time=00:10:00
#SBATCH --output={log}
exec {python} -m jupyterlab --no-browser --ip=127.0.0.1 --port={port} --IdentityProvider.token={token} --allow-root \\
  --ServerApp.root_dir={root}
"""


def manual_once(testhost: Path, python: str) -> float:
    token, port, local = secrets.token_hex(24), free_port(), free_port()
    root = tempfile.mkdtemp(prefix="manual-jupyter-")
    script = MANUAL_SCRIPT.format(python=python, port=port, token=token, root=root, log=f"{root}/job.log")
    started = time.monotonic()
    job = ssh(testhost, "sbatch", "--parsable", input=script).stdout.strip().split(";")[0]
    forward = None
    try:
        while True:   # poll squeue, as people do (`watch squeue --me`), once a second
            state, _, nodes = ssh(testhost, "squeue", "-h", "-j", job, "-o", "'%T|%N'").stdout.strip().partition("|")
            if state == "RUNNING":
                break
            if not state:
                raise RuntimeError(f"manual job {job} vanished")
            time.sleep(1.0)
        addr = [w.split("=", 1)[1] for w in ssh(testhost, "scontrol", "-o", "show", "node", nodes).stdout.split()
                if w.startswith("NodeAddr=")][0]
        forward = subprocess.Popen(["ssh", "-F", str(testhost / "ssh_config"), "-o",
                                    f"UserKnownHostsFile={testhost / 'known_hosts'}", "-o", "BatchMode=yes",
                                    "-N", "-L", f"127.0.0.1:{local}:{addr}:{port}", "testbox"],
                                   stderr=subprocess.DEVNULL)
        wait_answering(f"http://127.0.0.1:{local}/api/status", token)
        return time.monotonic() - started
    finally:
        if forward:
            forward.terminate()
            forward.wait(10)
        ssh(testhost, "scancel", job)
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--python", help="a python with JupyterLab the compute nodes see (default: the "
                                         "testcluster profile's)")
    args = parser.parse_args()
    testhost = Path(os.environ.get("DEVENV_TESTHOST_DIR", REPO / ".testhost")).resolve()
    if not args.python:
        import yaml

        args.python = yaml.safe_load((testhost / "home" / "profiles" / "hosts" / "testcluster.yaml").read_text())[
            "python"]
    home = Path(tempfile.mkdtemp(prefix="bench-slurm-home-"))
    shutil.copytree(testhost / "home", home, dirs_exist_ok=True)
    (home / "profiles" / "hosts" / "benchcluster.yaml").write_text(textwrap.dedent(f"""\
        description: the test host's Slurm cluster
        ssh:
          alias: testbox
        runtime: slurm
        python: {args.python}
        default_env: {ENV_NAME}
        slurm:
          partition: debug
          time: "00:10:00"
        """))
    (home / "profiles" / "envs" / f"{ENV_NAME}.yaml").write_text(
        "description: benchmark env\nimage: unused-on-slurm\nports:\n  jupyter: 8888\ngpus: none\n")
    os.environ.update(DEVENV_HOME=str(home), DEVENV_SSH_CONFIG=str(testhost / "ssh_config"),
                      DEVENV_KNOWN_HOSTS=str(testhost / "known_hosts"))
    byte_compile_devenv()   # as installed (see harness)
    times: dict[str, list[float]] = {"devenv up (CLI)": [], "devenv (service level)": [], "manual": []}
    for i in range(args.runs):   # alternate, so a warm page cache or a busy minute favours none
        times["manual"].append(manual_once(testhost, args.python))
        times["devenv up (CLI)"].append(devenv_cli_once())
        times["devenv (service level)"].append(devenv_once(args.python))
        print(f"run {i + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items()), file=sys.stderr)
    medians = {k: statistics.median(v) for k, v in times.items()}
    print(json.dumps({"machine": f"{platform.node()} {platform.machine()}, {os.cpu_count()} cores",
                      "load": os.getloadavg(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                      "runs": times, "medians": medians,
                      "ratio_cli": medians["devenv up (CLI)"] / medians["manual"],
                      "ratio_service": medians["devenv (service level)"] / medians["manual"]}, indent=2))
    shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
