"""The health gate end to end through the CLI on this machine, with the GPU's answers replayed (no GPU here):
tests/replay/nvidia-smi plays the H200's real `nvidia-smi -q` (REPLAY_HEALTH: an edited copy carrying one fault,
tests/fixtures/health/README.md), its query fields and pmon; tests/replay/sanity-python prints a real H200 quick
run; tests/replay/dcgm/dcgmi prints DCGM output composed to DCGM's schema (tests/fixtures/dcgm/README.md).
Real: the CLI, the probes run by the shell, this machine's dmesg/journal, ps and /proc, the judging, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from monitor_helpers import REPLAY_DIR

from devenv.cli import main

pytestmark = pytest.mark.timeout(120)
FIX = Path(__file__).parent / "fixtures"
UUID0 = "GPU-35c64b04-2d7b-9f48-2883-3f9d4b9d7f59"   # GPU 0 of the replayed stream
BUSY_TICK, IDLE_TICK = "20", "5"


@pytest.fixture
def gpu_box(isolated_home, monkeypatch, tmp_path):
    hosts = isolated_home / "profiles" / "hosts"
    hosts.mkdir(parents=True)
    (hosts / "gpu-box.yaml").write_text(
        f"description: this machine, bare host runtime, replayed GPU\nlocal: true\nruntime: host\n"
        f"python: {REPLAY_DIR / 'sanity-python'}\ndefault_env: cuda\n")
    apps = tmp_path / "apps.csv"
    apps.write_text("")
    monkeypatch.setenv("PATH", f"{REPLAY_DIR}:{os.environ['PATH']}")
    monkeypatch.setenv("REPLAY_APPS", str(apps))
    monkeypatch.setenv("REPLAY_APPS_LIVE", "1")
    monkeypatch.setenv("REPLAY_SELF_APPS", str(apps))
    monkeypatch.setenv("REPLAY_GPUS", "1")
    tick = tmp_path / "tick"
    tick.write_text(IDLE_TICK)  # idle before the run; busy (with the run alone) once it starts
    monkeypatch.setenv("REPLAY_TICK_FILE", str(tick))
    monkeypatch.setenv("REPLAY_SELF_TICK", BUSY_TICK)
    return apps


@pytest.fixture
def co_tenant(gpu_box, tmp_path, monkeypatch):
    """A real process of this machine standing in for the H200's idle co-tenant (60 GiB, no kernels): listed on
    GPU 0, and pmon prints the H200's real row of that co-tenant beside a load (sm '-') with its pid."""
    proc = subprocess.Popen(["sleep", "300"])
    with gpu_box.open("a") as f:
        f.write(f"{proc.pid}, python3, 62050, {UUID0}\n")
    lines = (FIX / "health" / "h200-cotenant-load.txt").read_text().splitlines()
    at = lines.index("== pmon -c 5, co-tenant idle + load")
    header, row = lines[at + 1:at + 3], lines[at + 3]
    assert row.split()[:4] == ["0", "494", "C", "-"]
    pmon = tmp_path / "pmon.txt"
    pmon.write_text("\n".join(header + [row.replace(" 494 ", f" {proc.pid} ".rjust(len(" 494 ")))]) + "\n")
    monkeypatch.setenv("REPLAY_PMON", str(pmon))
    yield proc
    proc.kill()
    proc.wait()


def test_check_of_a_healthy_gpu_has_a_passing_health_section(gpu_box):
    done = CliRunner().invoke(main, ["check", "gpu-box", "--json"])
    body = json.loads(done.stdout)
    health = next(c for c in body["checks"] if c["id"] == "gpu.0.health")
    assert health["status"] == "pass" and "ECC enabled, 0 uncorrectable" in health["value"]
    assert body["unhealthy"] is False and any(c["id"] == "gpu.xid" for c in body["checks"])
    assert done.exit_code != 7


def test_check_of_a_gpu_with_a_pending_row_remap_is_unhealthy_exit_7(gpu_box, monkeypatch):
    monkeypatch.setenv("REPLAY_HEALTH", "edited-remap-pending.txt")
    done = CliRunner().invoke(main, ["check", "gpu-box"])
    assert done.exit_code == 7, done.output
    assert "FAIL  GPU 0 health" in done.output and "Remapped Rows > Pending: Yes" in done.output
    assert "UNHEALTHY: GPU 0 health: Remapped Rows > Pending: Yes" in done.output
    assert "nvidia-smi -r -i 0" in done.output  # the remedy


def test_sanity_on_an_unhealthy_gpu_says_the_finding_first_and_judges_no_speed(gpu_box, monkeypatch):
    monkeypatch.setenv("REPLAY_HEALTH", "edited-ecc-uncorrectable.txt")
    done = CliRunner().invoke(main, ["sanity", "gpu-box", "--no-save"])
    assert done.exit_code == 7, done.output
    assert "UNHEALTHY  gpu-box: GPU 0 health: ECC Errors > Volatile (uncorrectable): 2: speed not judged" \
        in done.output
    before, _, health = done.output.partition("Health:")
    assert health.lstrip().startswith("FAIL  GPU 0 health") and "Needs attention:" not in before
    assert "Not judged (the GPU is unhealthy):" in done.output and "PASS  matmul bf16: accuracy" in done.output


def test_an_idle_co_tenant_is_named_and_speed_is_judged(co_tenant):
    done = CliRunner().invoke(main, ["sanity", "gpu-box", "--no-save", "--json"])
    verdict = json.loads(done.stdout)["verdict"]
    assert done.exit_code == 0, done.output
    assert verdict["status"] == "pass" and verdict["shared"] == []
    (who,) = verdict["idle"]
    assert who.startswith(f"GPU 0 also held pid {co_tenant.pid} (") and "60.6 GiB, at most 0% SM in" in who
    assert verdict["summary"].endswith(f"; {who}: idle, speed judged")


def test_a_working_co_tenant_is_still_busy(gpu_box, monkeypatch):
    proc = subprocess.Popen(["sleep", "300"])
    try:
        with gpu_box.open("a") as f:
            f.write(f"{proc.pid}, python3, 1130, {UUID0}\n")
        monkeypatch.setenv("REPLAY_TICK", BUSY_TICK)   # the replay's pmon gives it the recorded 99 %
        done = CliRunner().invoke(main, ["sanity", "gpu-box", "--no-save"])
        assert done.exit_code == 5, done.output
        assert f"GPU 0 was shared with pid {proc.pid}" in done.output
    finally:
        proc.kill()
        proc.wait()


def test_dcgm_without_dcgm_is_said_among_the_health_lines(gpu_box):
    said = CliRunner().invoke(main, ["sanity", "gpu-box", "--no-save", "--dcgm"])
    assert said.exit_code == 0, said.output
    assert "INFO  DCGM diag -r 1" in said.output.split("Health:")[1]
    assert "DCGM is not installed on gpu-box (no dcgmi)" in said.output


def test_dcgm_without_dcgm_says_so_and_what_ran_instead(gpu_box):
    done = CliRunner().invoke(main, ["sanity", "gpu-box", "--no-save", "--dcgm", "--json"])
    assert done.exit_code == 0, done.output
    dcgm = next(c for c in json.loads(done.stdout)["verdict"]["checks"] if c["check"] == "dcgm")
    assert dcgm["status"] == "info" and "DCGM is not installed on gpu-box (no dcgmi)" in dcgm["measured"]
    assert "devenv ran its own checks instead" in dcgm["measured"]


def test_dcgm_results_are_folded_into_the_verdict(gpu_box, monkeypatch):
    monkeypatch.setenv("PATH", f"{REPLAY_DIR / 'dcgm'}:{os.environ['PATH']}")
    monkeypatch.setenv("REPLAY_DCGM", str(FIX / "dcgm" / "r2-pass-composed.json"))
    done = CliRunner().invoke(main, ["sanity", "gpu-box", "--no-save", "--dcgm", "2", "--json"])
    assert done.exit_code == 0, done.output
    checks = {c["check"]: c for c in json.loads(done.stdout)["verdict"]["checks"]}
    assert checks["dcgm.memory"]["status"] == "pass" and checks["dcgm.pcie"]["status"] == "pass"
    assert checks["dcgm.targeted_stress"]["status"] == "skip"


def test_a_dcgm_hardware_failure_makes_the_verdict_unhealthy(gpu_box, monkeypatch):
    monkeypatch.setenv("PATH", f"{REPLAY_DIR / 'dcgm'}:{os.environ['PATH']}")
    monkeypatch.setenv("REPLAY_DCGM", str(FIX / "dcgm" / "r2-memory-fail-composed.json"))
    monkeypatch.setenv("REPLAY_DCGM_RC", "226")
    failed = CliRunner().invoke(main, ["sanity", "gpu-box", "--no-save", "--dcgm", "2"])
    assert failed.exit_code == 7, failed.output
    assert "UNHEALTHY  gpu-box: DCGM memory (GPU 0): Hardware/memory on GPU 0: Fail: Pending page retirements" \
        in failed.output
    assert "WARN  DCGM software (GPU 0)" in failed.output   # the host's setup, not the GPU


def test_dcgm_level_is_checked_at_the_boundary(gpu_box):
    done = CliRunner().invoke(main, ["sanity", "gpu-box", "--dcgm", "4"])
    assert done.exit_code == 2 and "--dcgm" in done.output


# --- the fleet: a choice of N GPUs skips the UNHEALTHY ones and says so -----------------------------------


def test_the_choice_of_n_gpus_never_picks_an_unhealthy_one():
    from devenv.gpu import choose

    states = [choose.GpuState(0, "GPU-a", 0, 0, 100), choose.GpuState(1, "GPU-b", 0, 0, 100)]
    states = choose.mark_unhealthy(states, {0: "Remapped Rows > Pending: Yes"})
    picked = choose.choose(states, 1, host="box")
    assert picked.indices == (1,) and [s.index for s in picked.skipped] == [0]
    assert picked.skipped[0].describe() == "GPU 0 is UNHEALTHY (Remapped Rows > Pending: Yes)"
    with pytest.raises(choose.NotEnoughFreeGpus) as refused:
        choose.choose(states, 2, host="box", allow_busy=True)   # not even with --allow-busy
    assert "only 1 of 2 on box is healthy: GPU 0 is UNHEALTHY (Remapped Rows > Pending: Yes)" in refused.value.message


@pytest.fixture
def two_gpus_one_sick(gpu_box, isolated_home, monkeypatch):
    monkeypatch.setenv("REPLAY_GPUS", "2")
    monkeypatch.setenv("REPLAY_HEALTH", "edited-remap-pending.txt")
    monkeypatch.setenv("REPLAY_HEALTH_GPUS", "0")
    envs = isolated_home / "profiles" / "envs"
    envs.mkdir(parents=True, exist_ok=True)
    bundled = (Path(__file__).parent.parent / "profiles" / "envs" / "cuda.yaml").read_text()
    (envs / "one.yaml").write_text(bundled.replace("gpus: all", "gpus: 1"))
    return gpu_box


def test_check_for_one_gpu_skips_the_sick_one_and_says_so(two_gpus_one_sick):
    done = CliRunner().invoke(main, ["check", "gpu-box", "--env", "one", "--json"])
    checks = {c["id"]: c for c in json.loads(done.stdout)["checks"]}
    choice = checks["gpu.choice"]
    assert choice["status"] == "pass" and choice["details"]["indices"] == [1]
    assert "skipped GPU 0 is UNHEALTHY (Remapped Rows > Pending: Yes)" in choice["value"]
    sick = checks["gpu.0.health.row-remap"]
    assert sick["status"] == "warn" and "not used" in sick["value"] and sick["details"]["unhealthy"]
    assert done.exit_code != 7


def test_check_for_all_gpus_on_a_host_with_a_sick_one_is_unhealthy(two_gpus_one_sick):
    done = CliRunner().invoke(main, ["check", "gpu-box"])
    assert done.exit_code == 7 and "UNHEALTHY: GPU 0 health: Remapped Rows > Pending: Yes" in done.output


def test_sanity_on_one_gpu_picks_the_healthy_one(two_gpus_one_sick):
    done = CliRunner().invoke(main, ["sanity", "gpu-box", "--gpus", "1", "--no-save"])
    assert done.exit_code == 0, done.output
    assert "GPU 0 is UNHEALTHY (Remapped Rows > Pending: Yes): not picked" in done.output


def test_ups_gpu_picker_skips_the_sick_gpu_and_notes_it(two_gpus_one_sick):
    from devenv.remote.local import LocalConnection
    from devenv.services import gpu_occupancy

    conn = LocalConnection("local")
    assert gpu_occupancy.unhealthy_gpus(conn) == {0: "Remapped Rows > Pending: Yes"}
    notes: list[str] = []
    assert gpu_occupancy.gpu_picker(conn, "gpu-box", on_note=notes.append)(1) == "1"
    assert notes == ["GPU 0 is UNHEALTHY (Remapped Rows > Pending: Yes): not picked"]


def test_the_python_replay_answers_devenvs_own_probes_from_the_recording():
    """tests/replay/sanity-python answers devenv's two probes of a host's python (the version, and python/torch)
    as the recorded H200 python did, without starting this machine's python: its copies of the probes are the
    ones devenv sends today, and its answers are the recording's fingerprint."""
    import inspect
    import shlex

    from devenv.checks.host import python_probe
    from devenv.services import sanity

    replay = str(REPLAY_DIR / "sanity-python")
    recording = (FIX / "sanity" / "h200-quick.jsonl").read_text().splitlines()
    fingerprint = json.loads(next(line for line in recording if '"check": "fingerprint"' in line))
    host_probe = shlex.split(python_probe(replay))
    assert host_probe[:2] == [replay, "-c"]
    answered = subprocess.run(host_probe, capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert json.loads(answered.stdout) == {"python": fingerprint["python"], "torch": fingerprint["torch"],
                                           "cuda": fingerprint["torch_cuda"], "arch_list": fingerprint["arch_list"]}
    version_probe = "import sys; print(sys.version_info[0])"
    assert f"-c '{version_probe}'" in inspect.getsource(sanity._check_python)
    answered = subprocess.run([replay, "-c", version_probe], capture_output=True, text=True, timeout=60)
    assert answered.stdout == "3\n"
    # anything else still runs a real python
    other = subprocess.run([replay, "-c", "import sys; print(sys.version_info[:2] >= (3, 10))"],
                           capture_output=True, text=True, timeout=60)
    assert other.stdout == "True\n"
