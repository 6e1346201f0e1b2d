"""The check judges, fed real recorded outputs (tests/fixtures/nvidia-smi from an H200) and real error texts."""

from __future__ import annotations

from pathlib import Path

import pytest

from devenv.checks import host as hc
from devenv.checks.report import PASS, WARN
from devenv.gpu import nvsmi
from devenv.remote.base import Result

FIX = Path(__file__).parent / "fixtures" / "nvidia-smi"


def out(stdout="", exit_code=0, stderr=""):
    return Result("probe", stdout, stderr, exit_code)


def h200_inventory_csv() -> str:
    # the recorded full query has more fields; rebuild the inventory row from the recorded values
    row = (FIX / "query-gpu_idle.csv").read_text().split(", ")
    fields = ["index", "uuid", "name", "driver_version", "pci.bus_id", "memory.total"]
    values = dict(zip(fields, row))
    cc = row[18]
    return ", ".join([values["index"], values["uuid"], values["name"], values["driver_version"],
                      values["memory.total"], cc, values["pci.bus_id"]]) + "\n"


def test_h200_recorded_output_is_read():
    checks, inventory, driver_cuda = hc.judge_gpus(out(h200_inventory_csv()),
                                                   out((FIX / "nvidia-smi_idle.txt").read_text()), True)
    assert driver_cuda == "13.0"
    assert inventory[0].name == "NVIDIA H200" and inventory[0].compute_capability == "9.0"
    assert inventory[0].memory_total_mib == 143771
    driver = checks[0]
    assert driver.status == "pass" and "580.159.04" in driver.value and "13.0" in driver.value
    assert "NVIDIA H200, 140 GiB, compute capability 9.0" in checks[1].value


def test_na_fields_are_none_not_errors():
    text = "0, GPU-x, [N/A], 580.159.04, [N/A], [Not Supported], 00000000:00:06.0\n"
    checks, inventory, _ = hc.judge_gpus(out(text), out(""), True)
    gpu = inventory[0]
    assert gpu.name is None and gpu.memory_total_mib is None and gpu.compute_capability is None
    assert checks[1].status == "warn" and "unknown model" in checks[1].value


@pytest.mark.parametrize("stdout, code, words", [
    ("", 127, "not installed"),
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
     "NVIDIA driver is installed and running.\n", 9, "cannot talk to the NVIDIA driver"),
    ("No devices were found\n", 6, "sees no GPU"),
])
def test_failing_nvidia_smi_is_one_clear_failure(stdout, code, words):
    checks, inventory, _ = hc.judge_gpus(out(stdout, code), out(stdout, code), wants_gpu=True)
    assert inventory == [] and len(checks) == 1
    assert checks[0].status == "fail" and words in checks[0].value and checks[0].remedy


def test_missing_driver_is_only_a_warning_for_a_cpu_environment():
    checks, _, _ = hc.judge_gpus(out("", 127), out("", 127), wants_gpu=False)
    assert checks[0].status == "warn" and "CPU-only" in checks[0].remedy


def test_mixed_gpu_models_warn():
    text = ("0, GPU-a, NVIDIA A100-SXM4-80GB, 550.54.14, 81920, 8.0, 0:1\n"
            "1, GPU-b, NVIDIA H100 80GB HBM3, 550.54.14, 81559, 9.0, 0:2\n")
    checks, inventory, _ = hc.judge_gpus(out(text), out(""), True)
    assert len(inventory) == 2
    assert checks[-1].id == "gpu.mixed" and checks[-1].status == "warn"


def test_name_with_a_comma_stays_one_field():
    rows = nvsmi.parse_csv("0, GPU-a, Tesla V100, 32GB, 535.1, 32768, 7.0, 0:1\n", nvsmi.INVENTORY_FIELDS)
    assert rows[0]["name"] == "Tesla V100, 32GB" and rows[0]["compute_cap"] == "7.0"


DOCKER_OK = ('{"Client":{"Version":"20.10.24"},"Server":{"Version":"20.10.24","ApiVersion":"1.41"}}\n')


def test_docker_ok():
    checks = hc.judge_docker(out(DOCKER_OK), out("{}"))
    assert checks[0].status == "pass" and "20.10.24" in checks[0].value


def test_docker_permission_denied_hints_the_docker_group():
    err = ("permission denied while trying to connect to the Docker daemon socket at "
           "unix:///var/run/docker.sock: Get \"http://%2Fvar%2Frun%2Fdocker.sock/v1.24/version\": dial unix "
           "/var/run/docker.sock: connect: permission denied")
    checks = hc.judge_docker(out('{"Client":{"Version":"20.10.24"},"Server":null}', 1, err), out("", 1))
    assert checks[-1].status == "fail" and "usermod -aG docker" in checks[-1].remedy


def test_docker_missing_and_daemon_down():
    assert "not installed" in hc.judge_docker(out("", 127), out("", 127))[0].value
    down = hc.judge_docker(out('{"Client":{"Version":"20.10.24"}}', 1,
                               "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
                               "Is the docker daemon running?"), out("", 1))
    assert down[-1].status == "fail" and "daemon not reachable" in down[-1].value


@pytest.mark.parametrize("free_bytes, size, present, status", [
    (100e9, 16, False, "pass"),
    (20e9, 16, False, "warn"),
    (10e9, 16, False, "fail"),
    (10e9, 16, True, "pass"),
    (10e9, None, False, "warn"),
])
def test_disk_vs_image_size(free_bytes, size, present, status):
    df = out(f"/dev/vda 252000000000 1000 {int(free_bytes)} 10% /\n")
    assert hc.judge_disk(df, "/var/lib/docker", present, size).status == status


def test_toolkit():
    hook = out("dockerd_path /usr/sbin:/usr/bin\nhook /usr/bin/nvidia-container-runtime-hook\n")
    assert hc.judge_toolkit(hook, {}, True, True).status == "pass"
    none = out("dockerd_path unknown\n")
    failed = hc.judge_toolkit(none, {"Runtimes": {"runc": {}}}, True, True)
    assert failed.status == "fail" and "nvidia-ctk runtime configure" in failed.remedy
    assert hc.judge_toolkit(none, {"Runtimes": {"nvidia": {}, "runc": {}}}, True, True).status == "pass"
    assert hc.judge_toolkit(out("cdi /etc/cdi/nvidia.yaml\n"), {}, True, True).status == "pass"
    assert hc.judge_toolkit(none, {}, False, True).status == "skip"


def test_os():
    text = 'Linux 6.1.0 x86_64\nPRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\n'
    check = hc.judge_os(out(text))
    assert check.status == "pass" and "Debian GNU/Linux 12" in check.value and "x86_64" in check.value
    assert hc.judge_os(out("Darwin 23.0 arm64\n")).status == "fail"


def test_batch_runs_probes_in_one_script_with_codes_stderr_and_a_time_limit():
    import subprocess

    probes = {"a": "echo hi; exit 3", "b": "sleep 5; echo late", "c": "echo x >&2; printf 'no newline'"}
    done = subprocess.run(["sh", "-c", hc.batch_script(probes, limit_s=1)], capture_output=True, text=True,
                          timeout=20)
    out = hc.parse_batch(done.stdout, probes)
    assert (out["a"].exit_code, out["a"].stdout) == (3, "hi\n")
    assert out["b"].exit_code == 124  # still running at the limit
    assert (out["c"].stdout, out["c"].stderr, out["c"].ok) == ("no newline", "x\n", True)
    assert hc.parse_batch("", {"z": "true"})["z"].exit_code == 255


def test_ssh_round_trip_and_shell_startup_are_judged_apart():
    fast = hc.judge_ssh(False, 3.0, "box", command_ms=20.0)
    assert fast.status == PASS and fast.details == {"latency_ms": 3.0, "shell_startup_ms": 17.0, "command_ms": 20.0}
    slow_shell = hc.judge_ssh(False, 3.0, "box", command_ms=1503.0)  # a slow ~/.bashrc, not the network
    assert slow_shell.status == WARN and "shell start-up 1500 ms" in slow_shell.value
    assert ".bashrc" in slow_shell.remedy and "jump host" not in slow_shell.remedy
    far = hc.judge_ssh(False, 250.0, "box", command_ms=260.0)  # the network itself is slow
    assert far.status == WARN and "jump host" in far.remedy and ".bashrc" not in far.remedy
