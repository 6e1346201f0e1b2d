"""Streams fail loudly (issue 14): the SSH connection killed from the server side (its per-session sshd) while
`exec` or `logs -f` streams is exit 3 with a message saying whether the command still runs, never a silent
255 or an exit 0 as if the stream had ended."""

from __future__ import annotations

import json
import signal
import time

import pytest
from sshd_sessions import listener_pid, serving, signal_all

pytestmark = pytest.mark.integration


def _kill_sessions(testhost, client: int) -> int:
    """Kill the sshd processes serving the devenv process `client` (found by its TCP connections, whichever
    channels they carry: a `dial-stdio` exec, or a streamlocal channel to Docker's socket that starts no
    process on the host)."""
    sessions = serving(listener_pid(testhost), testhost.port, client)
    signal_all(sessions, signal.SIGKILL)
    return len(sessions)


@pytest.mark.parametrize("what", ["exec", "logs"])
def test_connection_killed_during_a_stream_is_exit_3_with_what_still_runs(test_env, testhost, what):
    env = test_env.name
    json.loads(test_env.run("up", "testbox", "--env", env, "--detach", "--json").stdout)
    if what == "exec":
        proc = test_env.popen("exec", "testbox", "--env", env, "--", "sh", "-c", "echo start; sleep 60; echo end")
        assert proc.stdout.readline().strip() == "start"
    else:
        proc = test_env.popen("logs", "testbox", "--env", env, "-f", "--tail", "1")
        assert proc.stdout.readline()  # following
    time.sleep(0.5)
    assert _kill_sessions(testhost, proc.pid) >= 1
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 3, (proc.returncode, out, err)
    assert "connection to testbox was lost" in err, err
    if what == "exec":
        assert "running in the environment" in err and "pkill" in err, err
        assert "end" not in out
    else:
        assert "still running" in err and "logs HOST -f" in err, err
