"""`devenv monitor`'s sampler against the real test host (sshd on 127.0.0.1 + dockerd), whose nvidia-smi is
the REPLAY of the recorded H200 stream (tests/replay/nvidia-smi, named as such). The network between us and the
host is a TCP relay the test owns, so it can drop the connection and refuse new ones like a flaky link, without
touching the shared sshd. A real container's process shows with its container's name."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
import uuid

import pytest
from monitor_helpers import REPLAY_DIR, wait_until

from devenv.config import paths
from devenv.config.profiles import HostProfile, SSHTarget
from devenv.gpu.sample import Gap, GpuSample
from devenv.remote.pool import close_all, get_connection
from devenv.services.monitor import OK, RECONNECTING, HostSampler
from testhost import testhost, testhost_env, use_testhost  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
GPU3 = "GPU-35c64b04-2d7b-9f48-2883-3f9d4b9d7f03"


class Relay:
    """127.0.0.1:<port> -> 127.0.0.1:<target>, byte for byte. drop() cuts every live connection; refuse()
    stops listening (new connections are refused) until listen() again on the same port."""

    def __init__(self, target: int):
        self.target = target
        self.port = 0
        self._server: socket.socket | None = None
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self.listen()

    def listen(self) -> None:
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", self.port))
        server.listen(16)
        self.port = server.getsockname()[1]
        self._server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            with self._lock:
                self._socks += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def drop(self) -> int:
        with self._lock:
            socks, self._socks = self._socks, []
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass
        return len(socks) // 2

    def refuse(self) -> None:
        if self._server:
            try:
                self._server.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept(); close alone does not
            except OSError:
                pass
            self._server.close()
            self._server = None

    def close(self) -> None:
        self.refuse()
        self.drop()


@pytest.fixture
def relay(testhost):
    r = Relay(testhost.port)
    yield r
    r.close()


@pytest.fixture
def container(testhost):
    """A real container on the test host's dockerd; yields (name, host pid of its process)."""
    name = f"devenv-monitor-test-{uuid.uuid4().hex[:8]}"
    subprocess.run(["docker", "run", "-d", "--rm", "--name", name, testhost.base_image, "sleep", "300"],
                   check=True, capture_output=True, timeout=120)
    try:
        pid = subprocess.run(["docker", "inspect", "-f", "{{.State.Pid}}", name], check=True, capture_output=True,
                             text=True, timeout=30).stdout.strip()
        yield name, int(pid)
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60)


def test_replay_over_the_test_host_with_a_drop_and_a_container(testhost, use_testhost, relay, container, tmp_path):
    name, container_pid = container
    apps = tmp_path / "apps.csv"
    apps.write_text(f"{container_pid}, python3, 20480, {GPU3}\n")
    apps.chmod(0o644)
    # the test host's key, pinned for the relay's port
    key_type, key = testhost.known_hosts.read_text().split()[1:3]
    with paths.known_hosts_path().open("a") as f:
        f.write(f"[127.0.0.1]:{relay.port} {key_type} {key}\n")
    profile = HostProfile(name="testbox-relay", source="test", ssh=SSHTarget(
        hostname="127.0.0.1", port=relay.port, user="root", identity_file=str(testhost.identity_file),
        connect_timeout=5))
    replay = f"env REPLAY_GPUS=8 REPLAY_APPS={apps} {REPLAY_DIR}/nvidia-smi"
    sampler = HostSampler("testbox-relay", lambda: get_connection(profile), interval=0.5, process_interval=1.0,
                          nvidia_smi=replay, backoff_initial=0.5, backoff_max=2.0)
    sampler.start()
    try:
        snap = wait_until(lambda: (s := sampler.snapshot()).processes and s, 60, what="GPUs and processes")
        assert snap.state == OK and len(snap.gpus) == 8 and snap.driver_version == "580.159.04"
        [proc] = snap.processes
        assert (proc.pid, proc.container, proc.user, proc.gpu_uuid) == (container_pid, name, "root", GPU3)

        assert relay.drop() >= 1      # the link dies under us ...
        relay.refuse()                # ... and stays down for a while: reconnects are refused
        dropped = wait_until(lambda: (s := sampler.snapshot()).state == RECONNECTING and s, 15,
                             what="the drop to show")
        assert dropped.open_gap is not None
        time.sleep(2.5)
        assert sampler.snapshot().open_gap is not None, "no samples while the link is down"
        relay.listen()                # the link is back on the same port
        back = wait_until(lambda: (s := sampler.snapshot()).state == OK and s.reconnects == 1 and s, 30,
                          what="the reconnect")
        [gap] = back.gaps
        assert gap.end - gap.start >= 2.5
        points = back.history[0]
        at = next(i for i, p in enumerate(points) if isinstance(p, Gap))
        assert any(isinstance(p, GpuSample) for p in points[:at])
        wait_until(lambda: any(isinstance(p, GpuSample) and p.t >= gap.end
                               for p in sampler.snapshot().history[0]), 10, what="samples after the gap")
        wait_until(lambda: sampler.snapshot().processes_t > gap.end, 15, what="processes after the gap")
    finally:
        sampler.stop()
        close_all()


def test_keys_reach_the_provisioning_service_on_the_test_host(testhost, use_testhost, monkeypatch):
    """What j/u/d, the env state and the logs pane call, against the real Docker test host, for an owner with no
    environment there: each answers plainly (no environment), nothing is created or removed."""
    from devenv.config.profiles import load_host
    from devenv.errors import DevenvError
    from devenv.services.monitor_wiring import services_for

    monkeypatch.setenv("DEVENV_OWNER", f"monitor-test-{uuid.uuid4().hex[:6]}")
    services = services_for({"testbox": load_host("testbox")})
    try:
        assert services.env_state("testbox") == "none (cpu)"
        assert services.down("testbox") == "no environment 'cpu' on testbox: nothing to remove"
        with pytest.raises(DevenvError) as logs:
            list(services.follow_logs("testbox"))
        assert "no environment 'cpu' on testbox" in logs.value.message and "devenv up" in logs.value.hint
        with pytest.raises(DevenvError) as jupyter:
            services.open_jupyter("testbox")
        assert "has no running Jupyter (absent)" in jupyter.value.message
    finally:
        services.close()
        close_all()


def test_the_host_line_of_the_test_host_without_a_gpu(testhost, use_testhost):
    """`devenv monitor testbox --once` (text and --json) on the real test host, which has no GPU: it says
    no-gpu, and the host line carries the host's own /proc values (read here over a separate session)."""
    import json

    from click.testing import CliRunner

    from devenv.cli import main
    from devenv.config.profiles import load_host

    try:
        truth = get_connection(load_host("testbox")).run(
            "cat /proc/meminfo; getconf _NPROCESSORS_ONLN", timeout=30).stdout.splitlines()
        meminfo = {k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in truth[:-1] if ":" in line)}
        result = CliRunner().invoke(main, ["monitor", "testbox", "--once", "--json"])
        assert result.exit_code == 0, result.output
        data = json.loads(result.output)
        assert data["schema_version"] == 1
        [host] = data["hosts"]
        assert host["state"] == "no-gpu" and host["gpus"] == [] and "nvidia-smi" in host["message"]
        stats = host["host_stats"]
        assert stats["mem_total_kib"] == meminfo["MemTotal"] and stats["swap_total_kib"] == meminfo["SwapTotal"]
        assert 0 < stats["mem_used_kib"] < stats["mem_total_kib"]
        assert stats["ncpu"] == int(truth[-1]) and stats["load1"] is not None
        assert stats["cpu_pct"] is not None and 0 <= stats["cpu_pct"] <= 100
        assert stats["disk_total_kib"] > stats["disk_used_kib"] > 0 and stats["disk_mount"].startswith("/")

        text = CliRunner().invoke(main, ["monitor", "testbox", "--once"])
        assert text.exit_code == 0, text.output
        [line] = [line for line in text.output.splitlines() if line.startswith("  host: ")]
        gib = meminfo["MemTotal"] / 1024 ** 2
        total = f"{gib:.1f}" if gib < 10 else f"{gib:.0f}"
        assert f"% of {truth[-1]}  load " in line and f" / {total} GiB  swap " in line, line
        assert ("swap none" in line) == (meminfo["SwapTotal"] == 0), line
    finally:
        close_all()
