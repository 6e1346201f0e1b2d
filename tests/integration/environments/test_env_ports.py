"""Ports as ssh reads them (issue 28, point 4), on the real test host: `devenv tunnel HOST LOCAL:PORT` binds
LOCAL here and reaches the environment's PORT; a port whose last tunnel just closed (TIME_WAIT) is used again at
once; a taken LOCAL is its own exit code (6); the old PORT:LOCAL order is never taken silently."""

from __future__ import annotations

import json
import socket
import subprocess
import time

import pytest
from env_testing import docker
from sshd_fixture import free_port

pytestmark = pytest.mark.integration


def _get(port: int) -> str:
    """The body of /index.html through the tunnel, read to the server's end before this side closes (so the
    tunnel's side of the connection closes first and keeps the TIME_WAIT, as after a browser's visit)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"GET /index.html HTTP/1.0\r\n\r\n")
            answer = b""
            while chunk := s.recv(65536):
                answer += chunk
    except OSError:
        return ""
    head, _, body = answer.partition(b"\r\n\r\n")
    return body.decode() if head.startswith(b"HTTP/1.0 200") else ""


def _until(predicate, seconds: float = 60):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    return predicate()


def _serve(test_env, port: int) -> None:
    docker("exec", test_env.container, "sh", "-c", f"mkdir -p /tmp/s{port} && cd /tmp/s{port} && "
           f"echo served-{port} > index.html && (python3 -m http.server {port} --bind 0.0.0.0 >/dev/null 2>&1 &)")


def _listens(test_env, port: int) -> bool:
    return docker("exec", test_env.container, "python3", "-c",
                  f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2).close()").returncode == 0


def _open(test_env, *specs: str) -> tuple[subprocess.Popen, list[dict]]:
    proc = test_env.popen("tunnel", "testbox", *specs, "--env", test_env.name, "--json")
    line = proc.stdout.readline()
    if not line:
        proc.wait(timeout=30)
        raise AssertionError(f"tunnel exited {proc.returncode}: {proc.stderr.read()}")
    return proc, json.loads(line)["forwards"]


def _close(proc: subprocess.Popen) -> str:
    proc.terminate()
    proc.wait(timeout=30)
    return proc.stderr.read()


def test_tunnel_local_colon_remote_as_ssh_time_wait_reuse_and_clash(test_env):
    env = test_env.name
    test_env.run("up", "testbox", "--env", env, "--detach", "--json")
    _serve(test_env, 6006)
    _serve(test_env, 7007)
    assert _until(lambda: _listens(test_env, 6006) and _listens(test_env, 7007))
    local = free_port()

    # LOCAL:PORT as ssh -L: this machine's port first, the environment's second
    proc, forwards = _open(test_env, f"{local}:6006")
    try:
        assert forwards == [{"local": f"127.0.0.1:{local}", "local_port": local, "env_port": 6006}]
        assert _until(lambda: _get(local)) == "served-6006\n"
    finally:
        stderr = _close(proc)
    assert "Warning" not in stderr, stderr

    # the tunnel closed a moment ago: its port has a connection in TIME_WAIT, and is used again at once
    waiting = subprocess.run(["ss", "-Htan", "state", "time-wait", f"( sport = :{local} )"],
                             capture_output=True, text=True, check=True).stdout
    assert f"127.0.0.1:{local}" in waiting, "no TIME_WAIT left on the port: this check would prove nothing"
    proc, forwards = _open(test_env, f"{local}:7007")
    try:
        assert forwards[0]["local_port"] == local and forwards[0]["env_port"] == 7007
        assert _until(lambda: _get(local)) == "served-7007\n"

        # while it is held, the same LOCAL again is a port clash: exit 6, before anything connects
        clash = test_env.run("tunnel", "testbox", f"{local}:6006", "--env", env, check=False)
        assert clash.returncode == 6, clash.stderr
        assert f"local port {local} (LOCAL) is already in use" in clash.stderr and "Hint:" in clash.stderr
    finally:
        _close(proc)

    # the old order (PORT:LOCAL) is not taken silently: A:B asks for the environment's port B, where nothing
    # listens, while A does: the warning names the order and the command meant
    listening, silent = free_port(), free_port()
    _serve(test_env, listening)
    assert _until(lambda: _listens(test_env, listening))
    proc, forwards = _open(test_env, f"{listening}:{silent}")
    stderr = _close(proc)
    assert forwards[0]["local_port"] == listening and forwards[0]["env_port"] == silent
    assert f"nothing listens on port {silent} in {env}, but port {listening} does" in stderr, stderr
    assert f"{silent}:{listening}" in stderr, stderr
