"""`devenv jupyter` holds its tunnel through a dropped link and through a restart of the environment, as the
user runs it (a subprocess) against the test host's real docker environment and JupyterLab: the ControlMaster
killed under it (the link gone), then the environment taken down and made again on another host port. The
local port in the URL stays; a kernel's variable set before the drop is still there after it (same token, same
kernel); after the restart the new Jupyter answers on that same local port. Waits are on lines and answers."""

from __future__ import annotations

import json
import os
import queue
import signal
import threading
import time
from pathlib import Path

import requests
from env_testing import held_masters as masters
from env_testing import read_url
from jupyter_client import JupyterClient
from sshd_fixture import free_port


class Lines:
    def __init__(self, stream) -> None:
        self.all: list[str] = []
        self._queue: queue.SimpleQueue[str] = queue.SimpleQueue()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream) -> None:
        for line in stream:
            self.all.append(line.rstrip())
            self._queue.put(line.rstrip())

    def wait(self, fragment: str, timeout: float = 120.0) -> str:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._queue.get(timeout=left)
            except queue.Empty:
                break
            if fragment in line:
                return line
        raise AssertionError(f"no line with {fragment!r} within {timeout:.0f} s; said: {self.all}")


def lab_answers(url: str) -> bool:
    base, token = url.split("/lab?token=")
    try:
        return requests.get(f"{base}/api/status", headers={"Authorization": f"token {token}"}, timeout=5).ok
    except requests.RequestException:
        return False


def test_jupyter_s_tunnel_survives_a_dropped_link_and_a_restarted_environment(test_env):
    env = test_env.name
    test_env.run("up", "testbox", "--env", env, "--detach", "--json")
    proc = test_env.popen("jupyter", "testbox", "--env", env)
    try:
        url = read_url(proc)
        said = Lines(proc.stderr)
        said.wait("Tunnels open")
        with JupyterClient(url) as jc:
            kernel = jc.start_kernel()
            assert jc.execute(kernel, "x = 41").status == "ok"
            held = masters()
            assert len(held) == 1, held
            os.kill(held[0], signal.SIGKILL)                 # the link is gone
            said.wait("dropped")
            said.wait("reconnected to testbox")
            again = jc.execute(kernel, "print(x + 1)")      # same URL, token, kernel: its state kept
            assert again.status == "ok" and again.stdout == "42\n", again

        # the environment made again, on another host port: the held tunnel finds it through the backend
        urls = Lines(proc.stdout)
        test_env.run("down", "testbox", "--env", env)
        test_env.write_profile(ports={"jupyter": free_port(), "ssh": free_port()})
        made = json.loads(test_env.run("up", "testbox", "--env", env, "--detach", "--json").stdout)
        assert made["action"] == "created"
        said.wait("gone or moved")
        said.wait("reconnected to testbox")
        new_url = urls.wait("http://127.0.0.1:") if made["jupyter"]["token"] not in url else url
        assert new_url.startswith("http://127.0.0.1:")   # a line of its own on stdout: the URL, nothing else
        assert new_url.split("/lab")[0] == url.split("/lab")[0]   # the same local port
        assert lab_answers(new_url)
    finally:
        proc.terminate()
        assert proc.wait(15) == 0, proc.stderr.read() if proc.stderr else ""
    assert masters() == []


def test_up_in_the_foreground_reconnects_its_jupyter_tunnel(test_env):
    import re

    env = test_env.name
    proc = test_env.popen("up", "testbox", "--env", env)
    try:
        said = Lines(proc.stderr)
        out = Lines(proc.stdout)
        url = re.search(r"http://127\.0\.0\.1:\d+/lab\?token=\w+", out.wait("/lab?token=", 300)).group(0)
        said.wait("Tunnels open")
        assert lab_answers(url)
        held = masters()
        assert len(held) == 1, held
        os.kill(held[0], signal.SIGKILL)
        said.wait("dropped")
        said.wait("reconnected to testbox")
        assert lab_answers(url)
    finally:
        proc.terminate()
        assert proc.wait(15) == 0
    assert masters() == []


def test_jupyter_s_tunnel_comes_back_after_the_laptop_slept_and_the_host_dropped_it(test_env, testhost):
    """The lid closed: the real `devenv jupyter`'s process group and its ssh master stopped (SIGSTOP) for longer
    than the keepalive bound, while the host drops the session (its sshd serving the master ends); the lid
    opened (SIGCONT): the same local port answers the same JupyterLab, token and kernel state kept."""
    from sshd_sessions import listener_pid, serving, signal_all

    from devenv.remote.tunnels import SERVER_ALIVE

    bound = int(SERVER_ALIVE[0].split("=")[1]) * int(SERVER_ALIVE[1].split("=")[1])
    env = test_env.name
    test_env.run("up", "testbox", "--env", env, "--detach", "--json")
    proc = test_env.popen("jupyter", "testbox", "--env", env, new_session=True)
    asleep: list[int] = []
    try:
        url = read_url(proc)
        said = Lines(proc.stderr)
        said.wait("Tunnels open")
        with JupyterClient(url) as jc:
            kernel = jc.start_kernel()
            assert jc.execute(kernel, "x = 41").status == "ok"
            [master] = masters()
            sessions = serving(listener_pid(testhost), testhost.port, master)
            assert sessions, "no sshd serves the tunnel's master"
            os.killpg(proc.pid, signal.SIGSTOP)          # the lid closes: devenv and its ssh stop
            os.kill(master, signal.SIGSTOP)
            asleep = [master]
            signal_all(sessions, signal.SIGKILL)           # the host drops the session while the laptop sleeps
            gone = time.monotonic() + 60
            while any(Path(f"/proc/{pid}").exists() for pid in sessions) and time.monotonic() < gone:
                time.sleep(0.05)
            # the sleep itself (the scenario, not a wait for an event): longer than ServerAlive's bound
            time.sleep(bound + 1)
            os.kill(master, signal.SIGCONT)                # the lid opens
            os.killpg(proc.pid, signal.SIGCONT)
            asleep = []
            said.wait("dropped")
            said.wait("reconnected to testbox")
            assert master not in masters()
            again = jc.execute(kernel, "print(x + 1)")      # same URL, token, kernel: its state kept
            assert again.status == "ok" and again.stdout == "42\n", again
        assert lab_answers(url)
    finally:
        signal_all(asleep, signal.SIGCONT)
        try:
            os.killpg(proc.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        proc.terminate()
        assert proc.wait(15) == 0, proc.stderr.read() if proc.stderr else ""
    assert masters() == []


def test_up_holds_a_devcontainer_s_forward_ports_through_a_dropped_link(test_env, tmp_path):
    """`up` with a devcontainer.json's forwardPorts, held in the foreground: the link dropped (the ControlMaster
    killed) reopens the forwarded port beside Jupyter's, on the same local port."""
    import urllib.request

    port = free_port()
    project = tmp_path / "withports"
    (project / ".devcontainer").mkdir(parents=True)
    (project / ".devcontainer" / "devcontainer.json").write_text(json.dumps({
        "name": "With Ports", "image": "devenv-base:bookworm", "forwardPorts": [port],
        "postStartCommand": f"nohup python3 -m http.server {port} --bind 0.0.0.0 >/dev/null 2>&1 &"}))

    def serves(local: int) -> bool:
        try:
            return b"Directory listing" in urllib.request.urlopen(f"http://127.0.0.1:{local}/", timeout=5).read()
        except OSError:
            return False

    def until(what: str, ok, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not ok():
            assert time.monotonic() < deadline, f"not within {timeout:.0f} s: {what}"
            time.sleep(0.1)

    proc = test_env.popen("up", "testbox", "--env", test_env.name, "--devcontainer", str(project), "--yes")
    try:
        said, out = Lines(proc.stderr), Lines(proc.stdout)
        line = out.wait("forwardPorts: 127.0.0.1:", 600)
        local = int(line.split("127.0.0.1:")[1].split()[0])
        said.wait("Tunnels open")
        until("the forwarded port serves", lambda: serves(local))
        [master] = masters()
        os.kill(master, signal.SIGKILL)   # the link is gone
        said.wait("dropped")
        said.wait("reconnected to testbox")
        until("the forwarded port serves again, on the same local port", lambda: serves(local))
    finally:
        proc.terminate()
        assert proc.wait(15) == 0, proc.stderr.read() if proc.stderr else ""
    assert masters() == []
