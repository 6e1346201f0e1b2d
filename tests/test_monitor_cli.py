"""`devenv monitor` through click: --once and --json for scripts (against the bundled `local` host and a real
sshd, each with the nvidia-smi REPLAY), and the clear errors: no host named, no terminal, unreachable host."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner
from monitor_helpers import REPLAY_DIR, replay_sshd, trust
from sshd_fixture import free_port, make_key

from devenv.cli import main
from devenv.config import paths
from devenv.remote.pool import close_all

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def fresh_pool():
    yield
    close_all()


@pytest.fixture
def replay_on_path(monkeypatch):
    monkeypatch.setenv("PATH", f"{REPLAY_DIR}:{os.environ['PATH']}")
    monkeypatch.setenv("REPLAY_GPUS", "2")


def write_host(name: str, port: int, key) -> None:
    folder = paths.user_profiles_dir() / "hosts"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.yaml").write_text(
        f"description: test\nssh:\n  hostname: 127.0.0.1\n  port: {port}\n  user: root\n"
        f"  identity_file: {key.path}\n  connect_timeout: 5\nruntime: docker\ndefault_env: cpu\n")


def test_once_prints_a_gpustat_like_table(replay_on_path):
    result = CliRunner().invoke(main, ["monitor", "local", "--once"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("local  ok  driver 580.159.04  20")
    assert lines[1].startswith("  host: CPU ") and f"% of {os.cpu_count()}  load " in lines[1]
    assert lines[2].startswith("  [0] NVIDIA H200 |") and lines[3].startswith("  [1] NVIDIA H200 |")
    assert " / 143771 MiB" in lines[2] and " / 700 W" in lines[2] and "ECC 0" in lines[2]


def test_json_is_one_sample_per_host(replay_on_path):
    result = CliRunner().invoke(main, ["monitor", "local", "--json"])
    assert result.exit_code == 0, result.output
    [host] = json.loads(result.output)["hosts"]
    assert host["host"] == "local" and host["state"] == "ok" and host["driver_version"] == "580.159.04"
    assert [g["index"] for g in host["gpus"]] == [0, 1]
    gpu = host["gpus"][0]
    assert gpu["name"] == "NVIDIA H200" and gpu["mem_total_mib"] == 143771 and gpu["power_limit_w"] == 700.0
    assert gpu["fan_pct"] is None, "NA stays null in JSON"
    assert isinstance(gpu["throttle_reasons"], list) and isinstance(gpu["t"], float)
    assert host["fields_missing"] == [] and host["processes_error"] is None
    assert json.loads(result.output)["schema_version"] == 1


def meminfo_kib() -> dict[str, int]:
    return {k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in open("/proc/meminfo"))}


def test_json_host_line_is_this_machines(replay_on_path):
    """The host line of `local` is this machine's /proc: memory and swap totals, CPUs, and a CPU % from the two
    /proc/stat readings of the one look."""
    result = CliRunner().invoke(main, ["monitor", "local", "--json"])
    assert result.exit_code == 0, result.output
    [host] = json.loads(result.output)["hosts"]
    stats, mem = host["host_stats"], meminfo_kib()
    assert stats["mem_total_kib"] == mem["MemTotal"] and stats["swap_total_kib"] == mem["SwapTotal"]
    assert stats["mem_used_kib"] == stats["mem_total_kib"] - stats["mem_available_kib"]
    assert stats["swap_used_kib"] == stats["swap_total_kib"] - stats["swap_free_kib"]
    assert stats["ncpu"] == os.cpu_count() and 0 <= stats["cpu_pct"] <= 100 and stats["load1"] is not None
    assert stats["disk_total_kib"] > stats["disk_used_kib"] > 0 and "cpu_jiffies" not in stats


def test_host_without_a_gpu_is_reported_not_failed(monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    result = CliRunner().invoke(main, ["monitor", "local", "--once"])
    assert result.exit_code == 0, result.output
    assert "local  no-gpu" in result.output and "nvidia-smi is not installed" in result.output
    # no GPU, but the host line all the same
    [line] = [line for line in result.output.splitlines() if line.startswith("  host: ")]
    assert f"% of {os.cpu_count()}  load " in line and " GiB  swap " in line and "  disk " in line
    data = json.loads(CliRunner().invoke(main, ["monitor", "local", "--json"]).output)
    assert data["hosts"][0]["state"] == "no-gpu"
    assert data["hosts"][0]["host_stats"]["mem_total_kib"] == meminfo_kib()["MemTotal"]


def test_over_ssh_and_an_unreachable_host(tmp_path):
    key = make_key(tmp_path / "id")
    with replay_sshd(tmp_path / "sshd", key, env={"REPLAY_GPUS": "8"}) as server:
        trust(server)
        write_host("gpu-a", server.port, key)
        write_host("gone", free_port(), key)
        result = CliRunner().invoke(main, ["monitor", "gpu-a", "gone", "--json"])
    assert result.exit_code == 3  # cannot connect (to one of them), as in every command
    data = json.loads(result.output[:result.output.rindex("}") + 1])
    by_name = {h["host"]: h for h in data["hosts"]}
    assert by_name["gpu-a"]["state"] == "ok" and len(by_name["gpu-a"]["gpus"]) == 8
    assert by_name["gone"]["state"] == "error" and by_name["gone"]["message"]
    assert "Error: could not sample gone" in result.output and "Traceback" not in result.output


def test_no_host_named_and_none_running_is_a_clear_error(monkeypatch, tmp_path):
    """Without HOSTs the monitor asks every host profile which environments run; here none can answer."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    result = CliRunner().invoke(main, ["monitor"])
    assert result.exit_code != 0
    assert "skipped local:" in result.output and "skipped a100-box:" in result.output
    assert "Error: no host has a running environment" in result.output and "Hint: start one" in result.output


def test_unknown_host_profile():
    result = CliRunner().invoke(main, ["monitor", "no-such-host", "--once"])
    assert result.exit_code != 0 and "no-such-host" in result.output and "Traceback" not in result.output


def test_the_tui_needs_a_terminal():
    result = CliRunner().invoke(main, ["monitor", "local"])
    assert result.exit_code != 0
    assert "needs a terminal" in result.output and "--once" in result.output


def test_interval_must_be_positive():
    result = CliRunner().invoke(main, ["monitor", "local", "--interval", "0"])
    assert result.exit_code == 2 and "--interval" in result.output


def test_an_unknown_env_is_refused_before_the_tui_starts():
    result = CliRunner().invoke(main, ["monitor", "local", "--env", "no-such-env"])
    assert result.exit_code == 2, result.output
    assert "no-such-env" in result.output and "Traceback" not in result.output
    assert "needs a terminal" not in result.output
