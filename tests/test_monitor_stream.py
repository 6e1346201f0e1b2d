"""Streams for machines: `--json --watch` (NDJSON) and `--prometheus` (dcgm-exporter names), from the replayed
H200 (the `local` host with tests/replay on PATH) and recorded snapshots; and a real Prometheus server
(Debian's `prometheus`) scraping `devenv monitor --prometheus` over replayed 8-GPU hosts behind real sshds."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import requests
from monitor_helpers import REPLAY_DIR, T0, recorded_snapshot, replay_sshd, trust, wait_until
from prometheus_client import CollectorRegistry, generate_latest
from sshd_fixture import free_port, make_key

from devenv.services.monitor_stream import SCHEMA_VERSION, BadBind, DcgmCollector, parse_bind, watch_records

pytestmark = pytest.mark.timeout(120)
REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("text,expected", [
    ("127.0.0.1:9400", ("127.0.0.1", 9400)), ("9400", ("127.0.0.1", 9400)), (":9400", ("127.0.0.1", 9400)),
    ("localhost:9400", ("127.0.0.1", 9400)), ("[::1]:9400", ("::1", 9400)), ("127.0.0.2:1", ("127.0.0.2", 1)),
])
def test_loopback_binds(text, expected):
    assert parse_bind(text) == expected


@pytest.mark.parametrize("text,said", [
    ("0.0.0.0:9400", "beyond this machine"), ("[::]:9400", "beyond this machine"),
    ("10.0.0.5:9400", "beyond this machine"), ("127.0.0.1:x", "not a number"), ("127.0.0.1:70000", "out of range"),
    ("gpu-box:9400", "not an IP address"), ("127.0.0.1:9400\nfoo", "not a number"),
])
def test_other_binds_are_refused(text, said):
    with pytest.raises(BadBind) as refused:
        parse_bind(text)
    assert said in refused.value.message and refused.value.exit_code == 2


def test_a_public_bind_only_when_asked():
    assert parse_bind("0.0.0.0:9400", allow_public=True) == ("0.0.0.0", 9400)


class Served:
    def __init__(self, *snaps):
        self.snaps, self.i = list(snaps), 0
        self.host = snaps[0].host

    def snapshot(self):
        snap = self.snaps[min(self.i, len(self.snaps) - 1)]
        self.i += 1
        return snap


def test_watch_writes_each_sample_once_and_a_state_change_once():
    live = recorded_snapshot("h200-box", n_gpus=2, gap=False)
    newer = replace(live, last_sample_t=live.last_sample_t + 1)
    down = replace(newer, state="reconnecting", message="connection lost")
    sampler = Served(live, live, newer, down, down, down)
    ticks = []
    records = list(watch_records([sampler], 1.0, stop=lambda: len(ticks) >= 6, sleep=ticks.append))
    assert [r["state"] for r in records] == ["ok", "ok", "reconnecting"]
    assert all(r["schema_version"] == SCHEMA_VERSION and r["type"] == "sample" for r in records)
    assert records[1]["last_sample_time"] == live.last_sample_t + 1 and len(records[0]["gpus"]) == 2
    json.dumps(records)  # every record is plain JSON


def scrape(*snaps) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DcgmCollector([Served(s) for s in snaps]))
    return generate_latest(registry).decode()


def test_the_collector_speaks_dcgm_exporter_and_hides_stale_values():
    live = recorded_snapshot("h200-box", n_gpus=8, now=T0)
    down = replace(recorded_snapshot("lab-b", n_gpus=2, now=T0), state="reconnecting")
    text = scrape(live, down)
    gpu3 = live.gpus[3]
    line = next(line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_POWER_USAGE{") and 'gpu="3"' in line)
    for label in (f'UUID="{gpu3.uuid}"', 'modelName="NVIDIA H200"', 'Hostname="h200-box"', 'device="nvidia3"',
                  'DCGM_FI_DRIVER_VERSION="580.159.04"'):
        assert label in line
    assert float(line.rsplit(" ", 1)[1]) == gpu3.power_w
    assert sum(1 for line in text.splitlines() if line.startswith("DCGM_FI_DEV_GPU_UTIL{")) == 8
    assert 'Hostname="lab-b"' not in "".join(line for line in text.splitlines() if line.startswith("DCGM_"))
    assert 'devenv_host_up{Hostname="lab-b",state="reconnecting"} 0.0' in text
    assert "DCGM_FI_DEV_FAN_SPEED" not in text and "process_cpu" not in text


def test_the_cli_refuses_a_public_bind_before_connecting():
    from click.testing import CliRunner

    from devenv.cli import main
    result = CliRunner().invoke(main, ["monitor", "no-such-host", "--prometheus", "0.0.0.0:9400"])
    assert result.exit_code == 2 and "beyond this machine" in result.output and "--prometheus-public" in result.output


def test_json_watch_writes_ndjson_from_the_replay(tmp_path):
    env = {**os.environ, "PATH": f"{REPLAY_DIR}:{os.environ['PATH']}", "REPLAY_GPUS": "8",
           "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "devenv", "monitor", "local", "--json", "--watch",
                             "--interval", "0.5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=tmp_path)
    try:
        lines = []
        while len(lines) < 4:
            line = proc.stdout.readline()
            assert line, proc.stderr.read()
            lines.append(json.loads(line))
    finally:
        proc.terminate()
        assert proc.wait(15) == 0, proc.stderr.read()
    ok = [r for r in lines if r["state"] == "ok"]
    assert ok and all(r["host"] == "local" and r["schema_version"] == SCHEMA_VERSION for r in lines)
    assert len(ok[-1]["gpus"]) == 8 and ok[-1]["gpus"][0]["name"] == "NVIDIA H200"
    # a record per new GPU sample or new process sample (watch_records' key): under load a process sample can
    # come between two GPU samples, a second record with the same last_sample_time but a new processes_time
    times = [(r["last_sample_time"], r["processes_time"] or 0.0) for r in ok]
    assert times == sorted(set(times)), "each (GPU sample, process sample) once, in order"


def write_host(name: str, port: int, key) -> None:
    from devenv.config import paths

    folder = paths.user_profiles_dir() / "hosts"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.yaml").write_text(
        f"description: test\nssh:\n  hostname: 127.0.0.1\n  port: {port}\n  user: root\n"
        f"  identity_file: {key.path}\n  connect_timeout: 5\nruntime: docker\ndefault_env: cpu\n")


def prometheus_query(port: int, query: str) -> list:
    answer = requests.get(f"http://127.0.0.1:{port}/api/v1/query", params={"query": query}, timeout=5).json()
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def test_a_real_prometheus_scrapes_replayed_8_gpu_hosts(tmp_path):
    binary = shutil.which("prometheus")
    assert binary, "Debian's prometheus package is missing: testhost/setup installs it"
    key = make_key(tmp_path / "id")
    exporter_port, prom_port = free_port(), free_port()
    with replay_sshd(tmp_path / "a", key, env={"REPLAY_GPUS": "8"}) as a, \
            replay_sshd(tmp_path / "b", key, env={"REPLAY_GPUS": "8"}) as b:
        for server in (a, b):
            trust(server)
        write_host("gpu-a", a.port, key)
        write_host("gpu-b", b.port, key)
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        exporter = subprocess.Popen([sys.executable, "-m", "devenv", "monitor", "gpu-a", "gpu-b", "--prometheus",
                                     f"127.0.0.1:{exporter_port}", "--interval", "0.5"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        config = tmp_path / "prometheus.yml"
        config.write_text(f"global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: devenv\n"
                          f"    static_configs:\n      - targets: ['127.0.0.1:{exporter_port}']\n")
        prom = subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                 f"--web.listen-address=127.0.0.1:{prom_port}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            def both_hosts():
                try:
                    series = prometheus_query(prom_port, "DCGM_FI_DEV_GPU_UTIL")
                except requests.RequestException:
                    return None
                return series if {s["metric"]["Hostname"] for s in series} == {"gpu-a", "gpu-b"} and \
                    len(series) == 16 else None
            series = wait_until(both_hosts, 90, step=0.5, what="Prometheus to hold both hosts' 8 GPUs")
            labels = {(s["metric"]["Hostname"], s["metric"]["gpu"]) for s in series}
            assert labels == {(h, str(i)) for h in ("gpu-a", "gpu-b") for i in range(8)}
            one = series[0]["metric"]
            assert one["modelName"] == "NVIDIA H200" and one["UUID"].startswith("GPU-") and one["job"] == "devenv"
            [total] = prometheus_query(prom_port, 'sum(DCGM_FI_DEV_FB_USED{Hostname="gpu-a"}) >= 0')
            assert float(total["value"][1]) >= 0
            power = prometheus_query(prom_port, 'DCGM_FI_DEV_POWER_USAGE{Hostname="gpu-b",gpu="3"}')
            assert len(power) == 1 and 0 < float(power[0]["value"][1]) <= 700
            up = prometheus_query(prom_port, "devenv_host_up == 1")
            assert {s["metric"]["Hostname"] for s in up} == {"gpu-a", "gpu-b"}
        finally:
            for proc in (prom, exporter):
                proc.terminate()
            assert exporter.wait(15) == 0, exporter.stderr.read()
            prom.wait(15)
