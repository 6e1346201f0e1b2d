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


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def _tcp_entries() -> list[tuple[int, int, str]]:
    """(local port, remote port, inode) of every TCP socket on this machine."""
    entries = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            entries.append((int(fields[1].rsplit(":", 1)[1], 16), int(fields[2].rsplit(":", 1)[1], 16), fields[9]))
    return entries


def _session_sshds(listener: int, client: int, port: int) -> set[int]:
    """The per-session sshd processes (children of the test host's sshd) serving the devenv process `client`:
    found by its TCP connections to the sshd's port, whichever channels the session carries (exec channels
    running `dial-stdio`, or streamlocal channels to Docker's socket, which start no process on the host)."""
    entries = _tcp_entries()
    mine = _socket_inodes(client)
    client_ports = {local for local, remote, inode in entries if inode in mine and remote == port}
    server_inodes = {inode for local, remote, inode in entries if local == port and remote in client_ports}
    found = set()
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            pid = int(fd_dir.parent.name)
            if not _socket_inodes(pid) & server_inodes:
                continue
            while pid > 1:
                parent = _parent(pid)
                if parent == listener:
                    found.add(pid)
                    break
                pid = parent
        except (OSError, ValueError):
            continue
    return found


def _kill_sessions(testhost, client: int) -> int:
    listener = int((testhost.dir / "sshd.pid").read_text().split()[0])  # the fixture knows where setup put it
    sessions = _session_sshds(listener, client, 2201)
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
