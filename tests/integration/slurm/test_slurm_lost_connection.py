"""The connection to the login node lost while `up` waits in the queue of the test host's real 2-node cluster
(filled by another local user's jobs, so the job stays pending). The login node is reached through a TCP proxy
this test controls: cutting it closes every connection through it and refuses new ones, as a network that went
away does; opening it again is the network coming back.

Before: devenv said only "cannot connect" (exit 3) and never named the job, which stayed PENDING, to start
later and hold a node with Jupyter for its time limit; nothing that came after said it was there.

Only Slurm has a queue wait whose job outlives the connection (a container's half-made state is finished by the
next `up`, the contract suite's case), so this case lives here and not in tests/contract.
"""

from __future__ import annotations

import json
import signal
import socket
import threading

import pytest
from slurm_testing import live_jobs, wait_for
from test_slurm_busy_and_drained import FILLER, Lines, fill, filler, popen  # noqa: F401  (filler: a fixture)

import testhost

pytestmark = pytest.mark.integration


class CuttableProxy:
    """127.0.0.1:PORT forwarded to the test sshd; cut() drops every connection and refuses new ones, resume()
    accepts again on the same port."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self.port = 0
        self._listener: socket.socket | None = None
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        self.resume()

    def resume(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(8)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            sockets, self._open = self._open, []
        if listener is not None:
            listener.close()
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return   # closed by cut()
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not listener:   # cut while connecting
                    client.close()
                    upstream.close()
                    return
                self._open += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


@pytest.fixture
def through_proxy(cluster, tmp_path):
    """The cluster's profile pointed at the login node through a CuttableProxy (the test sshd's host key, pinned
    under its own name by HostKeyAlias)."""
    login_port = cluster.slurm.login_port   # the login node of this test's cluster (each has its own sshd port)
    proxy = CuttableProxy(("127.0.0.1", login_port))
    shared = (testhost.testhost_dir() / "ssh_config").read_text()
    config = tmp_path / "ssh_config"
    config.write_text(f"Host testcut\n  HostName 127.0.0.1\n  Port {proxy.port}\n"
                      f"  HostKeyAlias [127.0.0.1]:{login_port}\n"
                      f"  User root\n  IdentityFile {testhost.testhost_dir() / 'id_ed25519'}\n  IdentitiesOnly yes\n\n"
                      + shared)
    cluster.environ["DEVENV_SSH_CONFIG"] = str(config)
    profile = cluster.home / "profiles" / "hosts" / f"{cluster.host}.yaml"
    profile.write_text(profile.read_text().replace(f"alias: {cluster.slurm.alias}\n", "alias: testcut\n"))
    yield proxy
    proxy.cut()


def _up_until_pending(cluster) -> tuple:
    up = popen(cluster, "up", cluster.host, "--detach")
    said = Lines(up.stderr)
    line = said.wait(lambda text: text.startswith("==> Job") and " pending " in text, 90, "up's pending line")
    job_id = line.split()[2]
    return up, said, job_id


def test_a_connection_lost_in_the_queue_is_said_and_the_job_cancelled_once_the_login_node_answers_again(
        cluster, filler, through_proxy):  # noqa: F811
    fill(filler)
    up, said, job_id = _up_until_pending(cluster)
    try:
        through_proxy.cut()
        said.wait(lambda text: f"Lost the connection to {cluster.host} while `up` waited for job {job_id}" in text,
                  60, "the lost connection said at once")
        assert [j[2] for j in live_jobs(cluster.job_name)] == ["PENDING"]
        through_proxy.resume()
        assert up.wait(timeout=120) == 3
    finally:
        if up.poll() is None:
            up.kill()
    text = "".join(said.rest())
    assert f"Reconnected to {cluster.host}: devenv cancelled job {job_id}" in text, text
    assert "devenv reconnected and cancelled the job" in text and "Traceback" not in text, text
    assert not live_jobs(cluster.job_name)   # cancelled, never to hold a node


def test_a_connection_that_stays_lost_names_the_job_then_status_and_down_end_it(
        cluster, filler, through_proxy):  # noqa: F811
    fill(filler)
    up, said, job_id = _up_until_pending(cluster)
    try:
        through_proxy.cut()
        assert up.wait(timeout=120) == 3
    finally:
        if up.poll() is None:
            up.kill()
    text = "".join(said.rest())
    assert f"Lost the connection to {cluster.host} while `up` waited for job {job_id}" in text, text
    assert f"job {job_id} may still be queued" in text and "Traceback" not in text, text
    assert f"devenv down {cluster.host} --env {cluster.env}` cancels it" in text, text
    assert [j[2] for j in live_jobs(cluster.job_name)] == ["PENDING"]   # as said: still there
    through_proxy.resume()
    status = cluster.run("status", cluster.host, "--json")
    assert status.returncode == 0, status.stdout + status.stderr
    row, = [e for e in json.loads(status.stdout)["environments"] if e["env"] == cluster.env]
    assert row["state"] == "pending" and row["job_id"] == job_id, row
    assert "left by an `up` that lost its connection" in row["detail"], row
    assert f"devenv down {cluster.host} --env {cluster.env}" in row["detail"], row
    plain = cluster.run("status", cluster.host)
    assert "lost its connection" in plain.stdout, plain.stdout
    down = cluster.run("down", cluster.host)
    assert down.returncode == 0 and f"job {job_id}" in down.stdout + down.stderr, down.stdout + down.stderr
    wait_for(lambda: not live_jobs(cluster.job_name), 30, "the left job cancelled by down")
    after = cluster.run("status", cluster.host, "--json")
    assert not [e for e in json.loads(after.stdout)["environments"] if e["env"] == cluster.env
                and e["state"] in ("pending", "running")], after.stdout


def test_the_next_up_names_the_job_a_lost_connection_left_and_cancels_it_when_interrupted(
        cluster, filler, through_proxy):  # noqa: F811
    """The job left by the lost `up` is the next `up`'s own: said, waited for, and cancelled on Ctrl-C (a plain
    reattach leaves a job it did not submit running)."""
    fill(filler)
    first, said, job_id = _up_until_pending(cluster)
    try:
        through_proxy.cut()
        assert first.wait(timeout=120) == 3
    finally:
        if first.poll() is None:
            first.kill()
    said.rest()
    through_proxy.resume()
    again = popen(cluster, "up", cluster.host, "--detach")
    try:
        second = Lines(again.stderr)
        second.wait(lambda text: f"Job {job_id} was left in the queue when an earlier `up` lost its connection"
                    in text, 90, "the next up naming the left job")
        second.wait(lambda text: text.startswith(f"==> Job {job_id} pending"), 60, "the next up waiting for it")
        again.send_signal(signal.SIGINT)
        assert again.wait(timeout=120) == 130
    finally:
        if again.poll() is None:
            again.kill()
    assert any(f"Interrupted: devenv cancelled job {job_id}" in line for line in second.rest()), second.lines
    wait_for(lambda: not live_jobs(cluster.job_name), 30, "the left job cancelled by the interrupted up")
