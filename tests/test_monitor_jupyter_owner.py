"""The monitor's Jupyter plumbing without the TUI: the HTTP check that gates the URL (against real local HTTP
servers), and the tunnel owner thread that keeps a PR_SET_PDEATHSIG child alive after the caller's thread ends
(the bug behind `j` announcing a URL nobody listened on)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from monitor_helpers import wait_until
from sshd_fixture import free_port

from devenv.errors import ConnectError, DevenvError
from devenv.remote.tunnels import Forward, _die_with_parent
from devenv.services.monitor_jupyter import TunnelOwner, jupyter_answers, open_link

pytestmark = pytest.mark.timeout(60)


def serve(status: int, body: bytes):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()   # shutdown() waits a poll
    return server


def test_the_check_returns_jupyters_version():
    server = serve(200, json.dumps({"version": "2.14.2"}).encode())
    try:
        assert jupyter_answers(server.server_address[1], timeout=5) == "2.14.2"
    finally:
        server.shutdown()


@pytest.mark.parametrize("status,body,said", [
    (200, b"<html>a web server</html>", "not as Jupyter does"),
    (502, b"", "HTTP 502"),
])
def test_an_http_answer_that_is_not_jupyter_is_refused(status, body, said):
    server = serve(status, body)
    try:
        with pytest.raises(ConnectError) as failed:
            jupyter_answers(server.server_address[1], timeout=0.1)
        assert said in failed.value.message and "press j again" in failed.value.hint
    finally:
        server.shutdown()


def test_a_port_nobody_listens_on_is_refused():
    port = free_port()
    with pytest.raises(ConnectError) as failed:
        jupyter_answers(port, timeout=0.1)
    assert f"127.0.0.1:{port}" in failed.value.message


def child_with_pdeathsig() -> subprocess.Popen:
    """A child started as OpenSSHTunnel starts ssh: SIGTERM when the thread that forked it ends."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], preexec_fn=_die_with_parent,
                            start_new_session=True)


def started_from_a_thread_that_ends(start) -> subprocess.Popen:
    box = []
    thread = threading.Thread(target=lambda: box.append(start()))
    thread.start()
    thread.join()
    return box[0]


def test_a_child_started_by_a_short_lived_thread_dies_with_it():
    """The old `j`: the worker thread opened the tunnel and ended; its ssh was killed right after."""
    proc = started_from_a_thread_that_ends(child_with_pdeathsig)
    try:
        assert proc.wait(10) is not None
    finally:
        proc.kill()


def test_a_child_started_on_the_owner_thread_outlives_the_callers_thread():
    owner = TunnelOwner()
    proc = started_from_a_thread_that_ends(lambda: owner.call(child_with_pdeathsig))
    try:
        time.sleep(0.5)  # PDEATHSIG would have fired by now (the caller's thread has ended)
        assert proc.poll() is None, "the tunnel's child died with the thread that asked for it"
        owner.close()
        wait_until(lambda: not owner.thread.is_alive(), 5, what="the owner thread to end")
        assert proc.wait(10) is not None, "the owner's end ends its children too"
    finally:
        proc.kill()


class FakeTunnel:
    """A tunnel's shape over a real local port (the check is real; only opening ssh is left out)."""

    kind = "openssh"

    def __init__(self, local_port: int, remote_port: int):
        self.forwards = [Forward("jupyter", "127.0.0.1", remote_port, local_port)]
        self.closed = False

    def alive(self) -> bool:
        return not self.closed

    def close(self) -> None:
        self.closed = True


def test_open_link_reuses_a_live_tunnel_and_closes_one_that_reaches_no_jupyter():
    server = serve(200, json.dumps({"version": "2.14.2"}).encode())
    port = server.server_address[1]
    owner = TunnelOwner()
    opened: list[FakeTunnel] = []

    def opener(remote_port):
        opened.append(FakeTunnel(port, remote_port))
        return opened[-1]

    def url_of(p, token):
        return f"http://127.0.0.1:{p}/lab?token={token}"

    try:
        first = open_link(owner, "box", "cuda", lambda: (8888, "tok"), opener, url_of=url_of)
        assert (first.url, first.jupyter_version, first.reused) == (f"http://127.0.0.1:{port}/lab?token=tok",
                                                                      "2.14.2", False)
        again = open_link(owner, "box", "cuda", lambda: (8888, "tok"), opener, url_of=url_of)
        assert again.reused and len(opened) == 1
        # recreated on another host port: a new tunnel, the old one closed
        moved = open_link(owner, "box", "cuda", lambda: (8899, "tok"), opener, url_of=url_of)
        assert not moved.reused and len(opened) == 2 and opened[0].closed
        server.shutdown()
        server.server_close()
        opened[1].closed = True  # the tunnel died: the next `j` opens another, which reaches nothing
        with pytest.raises(DevenvError):
            open_link(owner, "box", "cuda", lambda: (8899, "tok"), opener, url_of=url_of,
                      check=lambda p: jupyter_answers(p, timeout=0.3))
        assert len(opened) == 3 and opened[2].closed, "a tunnel that reaches no Jupyter is not kept"
    finally:
        owner.close()
