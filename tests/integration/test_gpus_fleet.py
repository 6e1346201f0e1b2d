"""`devenv gpus @group` across hosts, one of them down and one that never answers, through the real CLI.

What is real: the sshds (the test host's, and one of our own on loopback), SSH, ps and /proc, a `sleep` of this
machine as someone's job. What is replayed: the GPU host's nvidia-smi (tests/replay: a real H200 recording,
2 GPUs, held at a tick where GPU 0 is under load, its compute-apps naming the real `sleep`). The test host has no
GPU and says so. "gone" is a port where nothing listens; "silent" accepts TCP and never says a word, so only the
command's bound ends the wait for it.
"""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from monitor_helpers import replay_sshd
from sshd_fixture import free_port, make_key

from devenv.cli import main
from devenv.remote import pool
from testhost import apply_testhost_env

pytestmark = pytest.mark.integration
UUID0 = "GPU-35c64b04-2d7b-9f48-2883-3f9d4b9d7f59"  # the recording's GPU 0


@pytest.fixture
def fleet(testhost, monkeypatch, tmp_path):
    applied = apply_testhost_env(monkeypatch, testhost.env, tmp_path)
    hosts = Path(applied["DEVENV_HOME"]) / "profiles" / "hosts"
    job = subprocess.Popen(["sleep", "600"])
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(4)
    try:
        apps = tmp_path / "apps.csv"
        apps.write_text(f"{job.pid}, python3, 1130, {UUID0}\n")
        key = make_key(tmp_path / "id_ed25519")
        server = replay_sshd(tmp_path / "sshd", key, env={"REPLAY_GPUS": "2", "REPLAY_TICK": "30",
                                                           "REPLAY_APPS": str(apps)})
        with server:
            with open(applied["DEVENV_KNOWN_HOSTS"], "a") as known:
                known.write(server.known_hosts_line())
            ssh = "ssh:\n  hostname: 127.0.0.1\n  user: root\n"
            (hosts / "gpu-a.yaml").write_text(f"{ssh}  port: {server.port}\n  identity_file: {key.path}\n"
                                              "  connect_timeout: 5\ngroups: [fleet]\n")
            (hosts / "box.yaml").write_text("ssh:\n  alias: testbox\nruntime: docker\ngroups: [fleet]\n")
            (hosts / "gone.yaml").write_text(f"{ssh}  port: {free_port()}\n  connect_timeout: 5\ngroups: [fleet]\n")
            (hosts / "silent.yaml").write_text(f"{ssh}  port: {silent.getsockname()[1]}\n  connect_timeout: 120\n"
                                               "groups: [fleet]\n")
            yield job.pid
    finally:
        pool.close_all()
        silent.close()
        job.kill()
        job.wait()


def cli(*args: str):
    result = CliRunner().invoke(main, list(args))
    print(f"\n$ devenv {' '.join(args)} -> {result.exit_code}\n{result.output[-3000:]}")
    assert "Traceback" not in result.output and result.exit_code != 70, result.output
    return result


def test_gpus_across_hosts_one_down_one_silent(fleet):
    job_pid = fleet
    listed = cli("gpus", "@fleet", "--timeout", "4", "--json")
    assert listed.exit_code == 3  # a host is down: said in the exit code, the others still shown
    doc = json.loads(listed.stdout[listed.stdout.index("{"):listed.stdout.rindex("}") + 1])
    hosts = {h["host"]: h for h in doc["hosts"]}
    assert doc["schema_version"] == 1 and list(hosts) == ["box", "gone", "gpu-a", "silent"]

    gpu = hosts["gpu-a"]
    assert gpu["state"] == "ok" and gpu["driver"] and gpu["cuda"], gpu
    g0, g1 = gpu["gpus"]
    assert "H200" in g0["sku"] and g0["mem_total_mib"] > 100_000 and g0["util_pct"] > 0
    assert not g0["free"] and any(f"python3 pid {job_pid}" in u and u.startswith("root") for u in g0["users"])
    assert g1["free"] and g1["users"] == [] and g1["mem_free_mib"] is not None
    assert (g0["health"], g1["health"]) == ("ok", "ok")  # the recorded H200 `nvidia-smi -q` is healthy

    assert hosts["box"]["state"] == "no-gpu" and "nvidia-smi is not installed" in hosts["box"]["reason"]
    assert hosts["gone"]["state"] == "down" and "connection refused" in hosts["gone"]["reason"]
    assert hosts["silent"]["state"] == "down" and hosts["silent"]["reason"] == "no answer within 4 s"

    table = cli("gpus", "box", "gpu-a", "gone")
    assert table.exit_code == 3
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["HOST", "GPU", "SKU", "MEM", "FREE/TOTAL", "UTIL", "HEALTH", "DRIVER/CUDA", "USED",
                                "BY"]
    rows = {(line.split()[0], line.split()[1]): line for line in lines[1:]}
    assert "no GPU" in rows[("box", "-")] and "DOWN" in rows[("gone", "-")]
    assert f"pid {job_pid}" in rows[("gpu-a", "0")] and rows[("gpu-a", "1")].rstrip().endswith("free")
