"""Streams fail loudly (issue 14): the SSH connection killed from the server side (its per-session sshd) while
`exec` or `logs -f` streams is exit 3 with a message saying whether the command still runs, never a silent
255 or an exit 0 as if the stream had ended."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def _parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def _session_sshds(listener: int) -> set[int]:
    """Per-session sshd processes of the test host's sshd that carry a `dial-stdio` (devenv's Docker API)."""
    found = set()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if b"dial-stdio" not in cmdline.read_bytes():
                continue
            pid = int(cmdline.parent.name)
            while pid > 1:
                parent = _parent(pid)
                if parent == listener:
                    found.add(pid)
                    break
                pid = parent
        except (OSError, ValueError):
            continue
    return found


def _kill_sessions(testhost) -> int:
    listener = int((testhost.dir / "sshd.pid").read_text().split()[0])  # the fixture knows where setup put it
    sessions = _session_sshds(listener)
    for pid in sessions:
        os.kill(pid, signal.SIGKILL)
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
    assert _kill_sessions(testhost) >= 1
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
