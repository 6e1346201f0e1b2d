"""A frozen connection (issue 14): the peer stops answering but the TCP connection stays up (the per-connection
sshd serving devenv is SIGSTOPped). devenv's keepalive (ServerAliveInterval/CountMax from `ssh -G`, here 1 s x 2)
notices it: `exec` and `logs -f` fail with exit 3 and say whether the command may still run and how to see or
stop it, instead of hanging until a channel timeout and dropping the rest of the output. `exec` with stdin or
`-t` goes through the user's OpenSSH (cli/exec_ssh.py): ssh is given the same keepalive, and its exit 255 with
its own message becomes the same exit 3 and message.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest
from sshd_sessions import listener_pid, serving, signal_all

pytestmark = pytest.mark.integration

# A hang guard, not a timing claim: the keepalive gives up after ~3 s; the Docker API's own channel timeout
# (runtimes/docker_api.API_TIMEOUT, 120 s) would end the stream much later; the guard sits between the two so a
# pass means the keepalive noticed.
HANG_GUARD = 90


def _short_keepalive_config(testhost, tmp_path) -> str:
    config = tmp_path / "ssh_config"
    config.write_text("Host testbox\n  ServerAliveInterval 1\n  ServerAliveCountMax 2\n\n"
                      + testhost.ssh_config.read_text())
    return str(config)


def _frozen_sessions(testhost, proc: subprocess.Popen) -> list[int]:
    pids = []
    for _ in range(50):  # the connection is up once the stream has printed; its sshd is found by its ports
        pids = serving(listener_pid(testhost), testhost.port, proc.pid)
        if pids:
            break
        time.sleep(0.1)
    assert pids, "no sshd serving devenv's connection was found"
    signal_all(pids, signal.SIGSTOP)
    return pids


@pytest.mark.parametrize("what", ["exec", "exec-stdin", "exec-tty", "logs"])
def test_a_frozen_connection_is_noticed_by_the_keepalive_and_is_exit_3(test_env, testhost, tmp_path, what):
    env = test_env.name
    json.loads(test_env.run("up", "testbox", "--env", env, "--detach", "--json").stdout)
    test_env.environ["DEVENV_SSH_CONFIG"] = _short_keepalive_config(testhost, tmp_path)
    if what == "exec":
        proc = test_env.popen("exec", "testbox", "--env", env, "--", "sh", "-c", "echo start; sleep 300; echo end")
        assert proc.stdout.readline().strip() == "start"
    elif what.startswith("exec-"):  # through OpenSSH: stdin is a pipe (and -t asks for a pty as well)
        tty = ["-t"] if what == "exec-tty" else []
        proc = test_env.popen("exec", "testbox", "--env", env, *tty, "--", "sh", "-c",
                              "echo start; sleep 300; echo end", stdin=subprocess.PIPE)
        assert proc.stdout.readline().strip() == "start"
    else:
        proc = test_env.popen("logs", "testbox", "--env", env, "-f", "--tail", "1")
        assert proc.stdout.readline()  # following
    frozen = _frozen_sessions(testhost, proc)
    try:
        out, err = proc.communicate(timeout=HANG_GUARD)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"devenv {what} still hung {HANG_GUARD} s after its connection froze:\n{err}")
    finally:
        signal_all(frozen, signal.SIGKILL)  # the frozen session serves nobody now; SIGCONT would only
        signal_all(frozen, signal.SIGCONT)  # let it die (a stopped process takes SIGKILL once continued)
        proc.kill()
    assert proc.returncode == 3, (proc.returncode, out, err)
    assert "connection to testbox was lost" in err, err
    # said why: the host stopped answering, not a plain end of stream (ssh says "Timeout, server ... not
    # responding", for the environment or for the host it goes through)
    assert "keepalive" in err or "not responding" in err, err
    if what.startswith("exec"):
        assert "running in the environment" in err and "pkill" in err, err
        assert "end" not in out
    else:
        assert "still running" in err and "logs HOST -f" in err, err
