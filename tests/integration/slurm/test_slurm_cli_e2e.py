"""The CLI end to end on the test host's real Slurm cluster, as a user drives it: `devenv up CLUSTER` holds a
tunnel (this machine -> the login node, the test sshd -> the compute node, through a relay in the job) to a
Jupyter whose kernel runs code inside the job -> `devenv sanity CLUSTER --nodes 2` (gloo on the CPUs) ->
`devenv down CLUSTER` leaves no job and no process (Jupyter, relay, tunnel). Run under the integration lock.
"""

from __future__ import annotations

import json
import queue
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import requests
from jupyter_client import JupyterClient
from slurm_testing import REPO, live_jobs, squeue, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
URL = re.compile(r"http://127\.0\.0\.1:\d+/lab\?token=\S+")


def my_live_jobs() -> set[str]:
    return {j[0] for j in squeue("--me") if j[2] in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING")}


def processes_mentioning(*needles: str) -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, timeout=30).stdout
    return [line for line in out.splitlines() if all(n in line for n in needles) and "ps -eo" not in line]


def own_processes_mentioning(home: Path, *needles: str) -> list[str]:
    """As processes_mentioning, of this test's devenv processes only (DEVENV_HOME=home in their environment): the
    other cluster's tests run `devenv up testcluster` too, under homes of their own (a `devenv up testcluster
    --detach` of another test failed this one in a full run)."""
    mine = f"DEVENV_HOME={home}".encode()
    found = []
    for line in processes_mentioning(*needles):
        try:
            environ = Path(f"/proc/{line.split()[0]}/environ").read_bytes().split(b"\0")
        except OSError:   # ended meanwhile, or not ours to read
            continue
        if mine in environ:
            found.append(line)
    return found


class Lines:
    """A process's stdout lines, read by a thread, so a test can wait for one with a bound."""

    def __init__(self, stream):
        self.seen: list[str] = []
        self._q: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream) -> None:
        for line in stream:
            self._q.put(line)
        self._q.put(None)

    def text(self, timeout: float) -> str:
        """Every line it printed, waiting up to timeout for the rest (after the process ended)."""
        self.wait_for(re.compile(r"(?!)"), timeout)   # a pattern that never matches: up to the end
        return "".join(self.seen)

    def wait_for(self, pattern: re.Pattern, timeout: float) -> str | None:
        while True:
            try:
                line = self._q.get(timeout=timeout)
            except queue.Empty:
                return None
            if line is None:
                return None
            self.seen.append(line)
            found = pattern.search(line)
            if found:
                return found.group(0)


def test_up_kernel_through_the_tunnel_sanity_two_nodes_then_down_leaves_nothing(cluster):
    before = my_live_jobs()
    up = subprocess.Popen([sys.executable, "-m", "devenv", "up", cluster.host], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=cluster.environ, cwd=REPO)
    errors = Lines(up.stderr)     # read as it comes: a full stderr pipe would stall `up` itself
    try:
        _up_then_sanity_then_down(cluster, up, errors, before)
    except BaseException:
        # whatever failed, leave nothing behind: the job goes through the product's own `down`, so that the
        # fixture's "no job left" check does not bury this failure under a second one
        if up.poll() is None:
            up.kill()
            up.wait(30)
        cluster.run("down", cluster.host, timeout=180)
        raise


def _up_then_sanity_then_down(cluster, up: subprocess.Popen, errors: Lines, before: set[str]) -> None:
    url = Lines(up.stdout).wait_for(URL, 300)
    try:
        if url is None:
            raise AssertionError(f"`devenv up` printed no URL:\n{errors.text(5)}")
        jobs = live_jobs(cluster.job_name)
        assert len(jobs) == 1 and jobs[0][2] == "RUNNING", jobs
        job_id, node = jobs[0][0], jobs[0][4]
        assert node in cluster.slurm.nodes  # its cluster's (tests/slurm_clusters.py)

        # a real kernel through devenv's tunnel: its code runs inside the job, on the compute node
        with JupyterClient(url, timeout=180) as jc:
            kernel = jc.start_kernel()
            run = jc.execute(kernel, "import os\nprint(6 * 7)\nos.environ['SLURM_JOB_ID'], "
                                     "os.environ['SLURMD_NODENAME'], os.getcwd()")
        assert run.status == "ok", run
        assert run.stdout == "42\n"
        assert run.result == repr((job_id, node, str(cluster.workspace)))
        assert requests.get(url.split("/lab")[0] + "/api/kernels", timeout=60).status_code == 403  # no token
    finally:
        up.send_signal(signal.SIGINT)        # Ctrl-C: the tunnel closes, the environment keeps running
        try:
            code = up.wait(180)              # a guard, not a timing: it ends within a second when idle
        except subprocess.TimeoutExpired:
            raise AssertionError(f"`devenv up` still ran 180 s after Ctrl-C:\n{errors.text(5)}") from None
    assert code == 0, errors.text(5)
    with pytest.raises(requests.ConnectionError):
        requests.get(url, timeout=10)        # the local port is closed with the tunnel
    wait_for(lambda: not processes_mentioning("--overlap", f"--jobid={job_id}"), 60,
             "the relays to end with `devenv up`")

    status = cluster.run("status", cluster.host, "--json")
    assert status.returncode == 0, status.stderr
    mine = [e for e in json.loads(status.stdout)["environments"] if e["env"] == cluster.env]
    assert len(mine) == 1 and mine[0]["state"] == "running" and mine[0]["job_id"] == job_id

    # sanity across both nodes of a new job, beside the environment's
    sanity = cluster.run("sanity", cluster.host, "--nodes", "2", "--json", timeout=600)
    assert sanity.returncode == 0, sanity.stdout + sanity.stderr
    checks = {c["id"]: c for c in json.loads(sanity.stdout)["verdict"]["checks"]}
    assert checks["multinode.ranks"]["status"] == "pass" and "2 node(s)" in checks["multinode.ranks"]["value"]
    assert checks["multinode.allreduce"]["status"] == "pass"
    assert not live_jobs("devenv-sanity")

    down = cluster.run("down", cluster.host)
    assert down.returncode == 0, down.stderr
    assert f"job {job_id}" in down.stdout
    wait_for(lambda: not live_jobs(cluster.job_name), 120, "the environment's job to end")
    assert my_live_jobs() <= before, "a job of this test is still in squeue"
    wait_for(lambda: not processes_mentioning("jupyterlab", f"/{cluster.owner}-{cluster.env}/"), 120,
             "the job's Jupyter to end")
    assert not processes_mentioning("--overlap", f"--jobid={job_id}")
    assert not own_processes_mentioning(cluster.home, "devenv", "up", cluster.host)
