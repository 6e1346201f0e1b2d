"""`check`, multi-node `sanity`, and the environment job's faults on the test host's real Slurm cluster.

Each fault must give one clear message, an exit code from the documented set, and leave no job behind
(the `cluster` fixture fails a test that left one). Run under the integration lock (see slurm_testing.py).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request

import pytest
from slurm_testing import Events, live_jobs, restart_slurmctld, slurm_dir, squeue, wait_for

from devenv.cluster.errors import JobEnded, JobRejected

pytestmark = pytest.mark.integration


def checks_of(stdout: str) -> dict[str, dict]:
    return {c["id"]: c for c in json.loads(stdout)["checks"]}


def test_check_reports_the_cluster_and_a_compute_node(cluster):
    done = cluster.run("check", cluster.host, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    checks = checks_of(done.stdout)
    assert checks["slurm.version"]["status"] == "pass" and checks["slurm.version"]["value"].startswith("Slurm ")
    debug = checks["slurm.partition.debug"]["details"]
    assert sorted(debug["nodes"]) == ["node1", "node2"] and debug["gpus_total"] == 0
    assert checks["slurm.request"]["status"] == "pass"
    assert checks["slurm.limits"]["status"] == "info"          # the test cluster keeps no accounting
    assert checks["node.job"]["status"] == "pass" and checks["node.job"]["details"]["node"] in ("node1", "node2")
    assert checks["python"]["status"] == "pass" and "torch" in checks["python"]["value"]
    assert checks["nvidia.driver"]["status"] == "warn"         # no GPU here, and a CPU env: said, not failed
    assert not live_jobs("devenv-check")


def test_check_with_an_unknown_partition_fails_and_submits_nothing(cluster):
    cluster.write_profile(partition="nope")
    before = {j[0] for j in squeue()}
    done = cluster.run("check", cluster.host, "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    request = checks_of(done.stdout)["slurm.request"]
    assert request["status"] == "fail" and "'nope' does not exist" in request["value"] and "debug*" in request["value"]
    assert {j[0] for j in squeue()} - before == set()   # none submitted (another test's job may end meanwhile)


def test_a_controller_that_does_not_answer_is_named_not_taken_for_a_missing_partition(cluster):
    """slurmctld stopped: `check` said "partition 'debug' does not exist (partitions: none)"; it now says the
    controller does not answer (exit 1), and `up` says squeue failed; nothing is submitted either way."""
    pid_file = slurm_dir() / "slurmctld.pid"
    os.kill(int(pid_file.read_text().strip()), signal.SIGTERM)
    wait_for(lambda: subprocess.run(["sinfo", "-h"], capture_output=True, timeout=30).returncode != 0, 30,
             "slurmctld stopped")
    try:
        done = cluster.run("check", cluster.host, "--json")
        assert done.returncode == 1, done.stdout + done.stderr
        checks = checks_of(done.stdout)
        down = checks["slurm.controller"]
        assert down["status"] == "fail" and "Unable to contact slurm controller" in down["value"], down
        assert "slurm.request" not in checks and "node.job" not in checks
        up = cluster.run("up", cluster.host, "--detach")
        assert up.returncode == 1 and "Unable to contact slurm controller" in up.stderr, up.stderr
        assert "Traceback" not in done.stderr + up.stderr
    finally:
        restart_slurmctld()
    assert not live_jobs(cluster.job_name)


def test_sanity_across_two_nodes_with_gloo(cluster):
    done = cluster.run("sanity", cluster.host, "--nodes", "2", "--json", timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    checks = {c["id"]: c for c in result["verdict"]["checks"]}
    assert checks["multinode.ranks"]["status"] == "pass" and "2 node(s)" in checks["multinode.ranks"]["value"]
    assert checks["multinode.allreduce"]["status"] == "pass"
    assert checks["multinode.ddp"]["status"] == "pass"
    assert checks["multinode.busbw"]["details"]["rows"][-1]["busbw_gbs"] > 0
    assert result["single"]["ddp"]["tokens_per_s"] > 0                 # the one-node baseline ran too
    assert {n["node"] for n in result["multi"]["nodes"]} == {"node1", "node2"}
    assert any(line.startswith("CPU only: no GPU interconnect was tested") for line in result["verdict"]["not_proven"])
    assert not live_jobs("devenv-sanity")


def test_sanity_nodes_on_a_host_that_is_not_a_cluster_is_bad_input(cluster):
    done = cluster.run("sanity", "testbox", "--nodes", "2")
    assert done.returncode == 2 and "needs a Slurm cluster" in done.stderr and "Traceback" not in done.stderr


def up(cluster, timeout: float = 240):
    from devenv.config.profiles import load_env
    from devenv.services.environments.contract import UpOptions

    svc = cluster.service()
    events = Events()
    result = svc.up(load_env(cluster.env), events=events, options=UpOptions(ready_timeout=timeout))
    return svc, result.status, result.token, events


def test_unknown_partition_at_up_is_rejected_with_the_known_ones(cluster):
    cluster.write_profile(partition="nope")
    with pytest.raises(JobRejected) as caught:
        up(cluster)
    assert caught.value.exit_code == 2
    assert "refused the job" in caught.value.message and "Invalid partition" in caught.value.message
    assert "debug" in caught.value.hint
    assert not live_jobs(cluster.job_name)


def test_a_job_slurm_rejects_says_why(cluster):
    cluster.write_profile(gpus_per_node=1)               # the test cluster has no GPU GRES
    with pytest.raises(JobRejected) as caught:
        up(cluster)
    assert caught.value.exit_code == 2
    assert "Invalid generic resource (gres) specification" in caught.value.message
    assert "gpus_per_node: 0" in caught.value.hint
    assert not live_jobs(cluster.job_name)


@pytest.mark.parametrize(("slurm", "said", "remedy"), [
    ({"gpus_per_node": 1}, "partition debug has no GPUs", "gpus_per_node: 0"),
    ({"partition": "nope"}, "partition 'nope' does not exist (partitions: debug*", "slurm.partition"),
], ids=["gres-it-lacks", "unknown-partition"])
def test_up_whose_request_the_cluster_cannot_meet_stops_at_the_preflight(cluster, slurm, said, remedy):
    """`up` checks the request against the cluster's partitions and GRES on the login node before it submits:
    the cluster's words, exit 2 (bad input: the profile asks what is not there), and no job at all."""
    cluster.write_profile(**slurm)
    done = cluster.run("up", cluster.host, "--detach")
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"Checking {cluster.host}" in done.stderr and said in done.stderr and remedy in done.stderr
    assert "refused the job" not in done.stderr and "Traceback" not in done.stderr   # sbatch never ran
    assert not squeue(f"--name={cluster.job_name}")


def get_through(port: int, token: str) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=10) as r:
        return r.status


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def open_tunnel(svc, env: str):
    from devenv.remote.relay import CommandTunnel
    from devenv.remote.tunnels import Forward

    status, token, command, watch = svc.jupyter_relay(env)
    forward = Forward("jupyter", "127.0.0.1", status.ports["jupyter"], free_port())
    return CommandTunnel(svc.conn, [forward], lambda f: command(), watch=watch, watch_every=2.0), forward, token


def test_time_limit_ends_the_job_while_the_tunnel_is_open(cluster):
    cluster.write_profile(time="1")                      # one minute: Slurm's smallest
    svc, status, token, _ = up(cluster)
    tunnel, forward, token = open_tunnel(svc, cluster.env)
    try:
        assert get_through(forward.local_port, token) == 200
        wait_for(lambda: not tunnel.alive(), 240, "the tunnel's watcher seeing the job end", every=2)
    finally:
        tunnel.close()
    assert "TIMEOUT" in tunnel.ended or "time limit" in tunnel.ended, tunnel.ended
    with pytest.raises(OSError):
        get_through(forward.local_port, token)           # the port is closed, not a zombie
    with pytest.raises(JobEnded) as caught:
        svc.running(cluster.env)
    assert caught.value.exit_code == 1 and "raise slurm.time" in caught.value.hint
    # squeue may still say COMPLETING for KillWait seconds (the reason already says TimeLimit): Slurm itself
    # finishes it, and then nothing of the job is left
    wait_for(lambda: not live_jobs(cluster.job_name), 60, "Slurm finishing the ended job")
    wait_for(lambda: not jupyter_processes(cluster.env), 30, "the ended job's Jupyter gone")


def jupyter_processes(env: str) -> list[str]:
    """jupyterlab processes of this test's environment (its env dir is in their command line)."""
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "jupyterlab" in line and f"/{os.environ['DEVENV_OWNER']}-{env}/"
            in line]


def slurmd_pid(node: str) -> int | None:
    try:
        pid = int((slurm_dir() / f"slurmd-{node}.pid").read_text().strip())
        cmdline = open(f"/proc/{pid}/cmdline").read()
    except (OSError, ValueError):
        return None
    return pid if "slurmd" in cmdline else None


def restart_slurmd(node: str) -> None:
    """As testhost/setup starts it: `slurmd -N node`, then RESUME in case the node stayed DOWN."""
    if slurmd_pid(node) is None:
        subprocess.run(["slurmd", "-N", node], check=True, timeout=60, close_fds=True)
    wait_for(lambda: slurmd_pid(node), 30, f"slurmd {node} running")
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        subprocess.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], capture_output=True, timeout=30)
        state = subprocess.run(["sinfo", "-h", "-n", node, "-o", "%t"], capture_output=True, text=True,
                               timeout=30).stdout.strip()
        if state in ("idle", "mix", "alloc"):
            return
        time.sleep(2)
    raise AssertionError(f"{node} did not come back after slurmd restarted")


def test_slurmd_killed_mid_job_is_reported_as_a_node_failure(cluster):
    svc, status, token, _ = up(cluster)
    node = status.nodes[0]
    pid = slurmd_pid(node)
    assert pid, f"no slurmd for {node}"
    tunnel, forward, token = open_tunnel(svc, cluster.env)
    try:
        assert get_through(forward.local_port, token) == 200
        os.kill(pid, signal.SIGKILL)
        # SlurmdTimeout=20 in the test cluster: the node goes DOWN and its job ends with NODE_FAIL
        wait_for(lambda: not tunnel.alive(), 180, "the tunnel's watcher seeing the node fail", every=2)
        assert "NODE_FAIL" in tunnel.ended or "node fail" in tunnel.ended.lower(), tunnel.ended
        with pytest.raises(JobEnded) as caught:
            svc.running(cluster.env)
        assert caught.value.exit_code == 1 and "healthy node" in caught.value.hint
        assert not live_jobs(cluster.job_name)
    finally:
        tunnel.close()
        restart_slurmd(node)
    # the restarted slurmd ends what the dead one left running: no Jupyter outlives its job
    wait_for(lambda: not jupyter_processes(cluster.env), 60, "the failed job's Jupyter gone")


def test_the_tunnels_first_relay_starts_while_up_waits_and_carries_the_first_request(cluster):
    """With relay_ahead (the CLI's held `up`), `up` starts the relay while Jupyter is still starting: the step
    runs in the job before `up` returns, the tunnel takes it, and the URL's first request goes through it. A
    failed `up` closes it (no step left in a cancelled job: the `cluster` fixture checks no job remains)."""
    from devenv.config.profiles import load_env
    from devenv.remote.relay import CommandTunnel
    from devenv.remote.tunnels import Forward
    from devenv.services.environments.contract import UpOptions

    svc = cluster.service()
    result = svc.up(load_env(cluster.env), events=Events(), options=UpOptions(ready_timeout=240, relay_ahead=True))
    access = result.jupyter
    assert access is not None and access.spare is not None
    steps = subprocess.run(["squeue", "--steps", "--noheader", f"--jobs={result.status.job_id}", "--format=%i|%j"],
                           capture_output=True, text=True, timeout=30).stdout.split()
    python = os.path.basename(svc.host.python)
    assert any(step.endswith(f"|{python}") for step in steps), steps    # the relay's step runs already
    forward = Forward("jupyter", "127.0.0.1", access.port, free_port())
    tunnel = CommandTunnel(svc.conn, [forward], lambda f: access.relay, watch=access.ended,
                           spares={"jupyter": access.spare})
    try:
        assert get_through(forward.local_port, access.token) == 200
        assert access.spare.take() is None             # the tunnel's first connection took it
        assert get_through(forward.local_port, access.token) == 200   # the next ones start their own, as before
    finally:
        tunnel.close()
        svc.down(cluster.env)
    assert not live_jobs(cluster.job_name)
