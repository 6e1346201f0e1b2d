"""The SSH connection killed from the server side (the test host's per-connection sshd serving devenv's own
connection, found by its TCP ports, SIGKILLed) during `up` and during the monitor (issue 14's "Show").

- `up`: whatever moment the kill lands on, `up` either finishes (it re-dials) or fails loudly (exit 3, the
  connection named as lost); the next `up` finishes the job, and nothing is half-made or made twice: one
  container, running, one network, one workspace volume, and the environment answers.
- monitor: the sampler reports the host as lost (state reconnecting, with why), never silent, then reconnects
  on its own and samples again.
"""

from __future__ import annotations

import json
import os
import signal
import threading

import pytest
from monitor_helpers import REPLAY_DIR, wait_until
from sshd_sessions import listener_pid, serving, signal_all

from devenv.config.profiles import HostProfile, SSHTarget
from devenv.remote.pool import close_all, get_connection
from devenv.services.monitor import OK, RECONNECTING, HostSampler

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]


@pytest.mark.parametrize("moment", ["Created network", "Starting the environment", "Waiting for"])
def test_connection_killed_during_up_then_up_finishes_the_job(test_env, testhost, moment):
    env = test_env.name
    proc = test_env.popen("up", "testbox", "--env", env, "--detach", "--json")
    seen: list[str] = []
    killed: list[int] = []

    def read_stderr() -> None:  # progress goes to stderr; kill the connection when the moment's step shows
        for line in proc.stderr:
            seen.append(line)
            if moment in line and not killed:
                pids = serving(listener_pid(testhost), testhost.port, proc.pid)
                killed.extend(pids or [0])
                signal_all(pids, signal.SIGKILL)

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        out = proc.stdout.read()
        proc.wait(timeout=300)
    finally:
        proc.kill()
    reader.join(30)
    err = "".join(seen)
    print(f"up with its connection killed at {moment!r}: exit {proc.returncode}; last line: {seen[-1:]}")
    assert killed and killed != [0], f"the step {moment!r} was not seen, or no sshd served it:\n{err}"
    # finished after re-dialling, or failed loudly as a lost connection: never a traceback, never silence
    assert proc.returncode in (0, 3), (proc.returncode, out, err)
    if proc.returncode == 3:
        assert "lost" in err and "connection" in err, err
    assert "Traceback" not in err

    again = json.loads(test_env.run("up", "testbox", "--env", env, "--detach", "--json").stdout)
    assert again["status"]["state"] == "running"
    assert len(test_env.containers()) == 1, test_env.containers()
    assert len(test_env.networks()) == 1, test_env.networks()
    assert len(test_env.volumes()) == 1, test_env.volumes()
    assert test_env.state() == "running"
    assert test_env.run("exec", "testbox", "--env", env, "--", "echo", "whole").stdout.strip() == "whole"
    third = json.loads(test_env.run("up", "testbox", "--env", env, "--detach", "--json").stdout)
    assert third["action"] == "reattached"  # the environment it finished is the one its profile asks for


def test_connection_killed_during_monitor_is_reported_lost_then_reconnects(testhost, use_testhost, tmp_path):
    profile = HostProfile(name="testbox", source="test", ssh=SSHTarget(
        hostname="127.0.0.1", port=testhost.port, user="root", identity_file=str(testhost.identity_file),
        connect_timeout=10))
    replay = f"env REPLAY_GPUS=2 {REPLAY_DIR}/nvidia-smi"
    sampler = HostSampler("testbox", lambda: get_connection(profile), interval=0.5, process_interval=1.0,
                          nvidia_smi=replay, backoff_initial=0.5, backoff_max=2.0)
    sampler.start()
    try:
        wait_until(lambda: (s := sampler.snapshot()).state == OK and s.samples > 2 and s, 60, what="samples")
        pids = serving(listener_pid(testhost), testhost.port, os.getpid())
        assert pids, "no sshd serves the monitor's connection"
        print("killed", pids)
        signal_all(pids, signal.SIGKILL)
        lost = wait_until(lambda: (s := sampler.snapshot()).state == RECONNECTING and s, 60,
                          what="the host reported as lost")
        assert lost.message and lost.open_gap is not None, lost
        print("reported:", lost.state, lost.message, lost.hint)
        back = wait_until(lambda: (s := sampler.snapshot()).state == OK and s.reconnects >= 1 and s, 60,
                          what="the reconnect")
        [gap] = back.gaps
        assert gap.end is not None
        wait_until(lambda: sampler.snapshot().last_sample_t > gap.end, 30, what="samples after the reconnect")
    finally:
        sampler.stop()
        close_all()
