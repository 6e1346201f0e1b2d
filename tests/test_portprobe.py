"""Readiness probes through the host's published ports (remote.portprobe, services.readiness) against real
servers on loopback: a Jupyter-like HTTP server, an sshd, a proxy that accepts and hangs up (Docker's userland
proxy with nothing behind it), a silent server, a closed port. Over this machine's sockets (LocalConnection)
and over a real sshd's direct-tcpip channels (SSHConnection), and the sshd that refuses forwarding."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from sshd_fixture import SSHD, free_port, make_key

from devenv.config import paths
from devenv.config.profiles import SSHTarget
from devenv.remote.local import LocalConnection
from devenv.remote.pool import close_all
from devenv.remote.ssh import SSHConnection
from devenv.services import readiness

pytestmark = pytest.mark.timeout(60)


class _Api(BaseHTTPRequestHandler):
    body = json.dumps({"version": "2.14.2"}).encode()

    def do_GET(self):  # noqa: N802 (http.server's name)
        ok = self.path == "/api"
        self.send_response(200 if ok else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(self.body if ok else b"{}")

    def log_message(self, *args):
        pass


class _NotJupyter(_Api):
    body = b"<html>hello</html>"


@pytest.fixture
def http_server():
    servers = []

    def start(handler=_Api) -> int:
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server.server_address[1]

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def tcp_server():
    """A listener that does one thing with every connection: send bytes then close, close at once, or stay
    silent (until the test ends)."""
    listeners, held = [], []

    def start(behaviour: str, data: bytes = b"") -> int:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        listeners.append(sock)

        def serve():
            while True:
                try:
                    conn, _ = sock.accept()
                except OSError:
                    return
                if behaviour == "silent":
                    held.append(conn)
                    continue
                if data:
                    conn.sendall(data)
                conn.close()

        threading.Thread(target=serve, daemon=True).start()
        return sock.getsockname()[1]

    yield start
    for sock in listeners + held:
        sock.close()


def test_a_jupyter_and_an_sshd_that_answer_are_ok(http_server, tcp_server):
    ports = {"jupyter": http_server(), "ssh": tcp_server("send", b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n")}
    said = readiness.ask(LocalConnection(), ports, ["jupyter", "sshd"])
    assert said == {"jupyter": "ok: jupyter-server 2.14.2", "sshd": "ok: SSH-2.0-OpenSSH_9.2p1 Debian-2"}
    probe = readiness.probe_ports(LocalConnection(), ports, ["jupyter", "sshd"])
    assert probe.ok and probe.down == ()


def test_a_port_that_accepts_and_hangs_up_is_not_an_answer(tcp_server):
    """Docker's proxy on a published port accepts even when the service inside is dead."""
    port = tcp_server("close")
    said = readiness.ask(LocalConnection(), {"jupyter": port, "ssh": port}, ["jupyter", "sshd"])
    assert said == {"jupyter": "down: closed without an HTTP answer", "sshd": "down: closed without a banner"}


def test_what_is_not_jupyter_or_sshd_is_down(http_server, tcp_server):
    ports = {"jupyter": http_server(_NotJupyter), "ssh": tcp_server("send", b"HTTP/1.1 400 Bad Request\r\n")}
    said = readiness.ask(LocalConnection(), ports, ["jupyter", "sshd"])
    assert said["jupyter"] == "down: /api answered, but not as a Jupyter server"
    assert said["sshd"].startswith("down: unexpected banner 'HTTP/1.1 400")


def test_a_closed_port_a_silent_one_and_none_published(tcp_server):
    closed, silent = free_port(), tcp_server("silent")
    said = readiness.ask(LocalConnection(), {"jupyter": closed, "ssh": silent}, ["jupyter", "sshd"], timeout=0.5)
    assert said["jupyter"].startswith("down: connection refused")
    assert said["sshd"] == "down: no answer within the timeout"
    probe = readiness.probe_ports(LocalConnection(), {}, ["jupyter", "sshd"])
    assert not probe.ok and probe.down == ("jupyter", "sshd") and "jupyter down: no port published" in probe.text


# --- the same through a real sshd: direct-tcpip channels on the connection already open ----------------------

@pytest.fixture
def key(tmp_path):
    return make_key(tmp_path / "keys" / "id_ed25519")


def _connect(server: SSHD, key) -> SSHConnection:
    with paths.known_hosts_path().open("a") as f:
        f.write(server.known_hosts_line())
    return SSHConnection(SSHTarget(hostname="127.0.0.1", port=server.port, user="root",
                                   identity_file=str(key.path)), name="box")


def test_over_ssh_the_probe_opens_channels_not_commands(tmp_path, key, http_server, tcp_server, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    ports = {"jupyter": http_server(), "ssh": tcp_server("close")}
    with SSHD(tmp_path / "sshd", authorized_keys=[key.public]) as server, _connect(server, key) as conn:
        conn.open()
        said = readiness.ask(conn, ports, ["jupyter", "sshd"])
        assert said == {"jupyter": "ok: jupyter-server 2.14.2", "sshd": "down: closed without a banner"}
        refused = readiness.ask(conn, {"jupyter": free_port()}, ["jupyter"])
        assert refused["jupyter"].startswith("down: connection refused")
        log = server.log_text()
    close_all()
    assert f"server_request_direct_tcpip: originator 127.0.0.1 port 0, target 127.0.0.1 port {ports['jupyter']}" \
        in log
    assert "ctype session" not in log  # no command (no login shell, no process on the host) for any probe


def test_an_sshd_without_forwarding_cannot_probe_and_says_so(tmp_path, key, http_server, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    with SSHD(tmp_path / "closed", authorized_keys=[key.public], extra_config="AllowTcpForwarding no") as server, \
            _connect(server, key) as conn, pytest.raises(readiness.CannotProbe, match="refuses TCP forwarding"):
        readiness.ask(conn, {"jupyter": http_server()}, ["jupyter"])


def test_the_sshd_probe_says_who_it_is_so_sshd_logs_no_error(tmp_path, key, monkeypatch):
    """A bare banner read makes sshd log an error per probe (kex_exchange_identification: ...); the probe sends
    its own identification line first, and sshd ends the pre-auth connection without an error."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    with SSHD(tmp_path / "sshd", authorized_keys=[key.public]) as server:
        deadline = time.monotonic() + 10  # the fixture's own start-up check connected bare: past its lines
        while "Connection closed by" not in server.log_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        before = len(server.log_text())
        said = readiness.ask(LocalConnection(), {"ssh": server.port}, ["sshd"])
        assert said["sshd"].startswith("ok: SSH-2.0-OpenSSH")
        # until sshd has ended the probe's connection (bounded, no timing assert): its pre-auth child's "Connection
        # closed by" line, or the monitor's own end of it ("do_cleanup"), which is all a loaded machine may show:
        # the child's last lines come through a log pipe the monitor can close first (seen in a full run)
        deadline = time.monotonic() + 10
        while not any(end in server.log_text()[before:] for end in ("Connection closed by", "do_cleanup")) \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        log = server.log_text()[before:]
    assert "Connection closed by 127.0.0.1" in log or "do_cleanup" in log, log
    assert "kex_exchange_identification" not in log and "banner exchange" not in log, log


@pytest.mark.parametrize(("body", "version"), [
    (b'{"version": "2.14.2"}', "2.14.2"),
    ('{"version": "2.14.2"}', "2.14.2"),
    (b"<html>a web server</html>", None),
    (b'["version"]', None),                 # JSON, but not an object
    (b'{"version": 2}', None),              # not a version string
    (b"", None),
])
def test_what_counts_as_jupyters_api_answer(body, version):
    """One rule for the readiness probe (over the host's connection) and the monitor's `j` (through the tunnel)."""
    from devenv.remote.portprobe import api_version

    assert api_version(body) == version
