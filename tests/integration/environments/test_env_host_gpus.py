"""`gpus:` on a host without Docker (`runtime: host`): there is no device cgroup, so the environment's Jupyter,
its kernels and `devenv exec` see the chosen GPUs through CUDA_VISIBLE_DEVICES, in nvidia-smi's order
(CUDA_DEVICE_ORDER=PCI_BUS_ID). `gpus: 1` takes the free GPU, not the busy one; the choice is kept in the host's
state file (a re-`up` reattaches), and `status` shows it.

What is real: an sshd of our own on loopback, the host runtime's Jupyter started with a real python, ps and /proc.
What is replayed: nvidia-smi (tests/replay, a real H200 recording at a tick where GPU 0 is under load), whose
compute-apps list a real `sleep` of this machine on GPU 0 (someone else's job).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from env_testing import replay_gpu_host
from sshd_fixture import free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


def environ_of(pid: int) -> dict[str, str]:
    pairs = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(p.decode().split("=", 1) for p in pairs if b"=" in p)


@pytest.fixture
def bare_gpubox(tmp_path, host_python):
    with replay_gpu_host(tmp_path, "bare", f"runtime: host\npython: {host_python}\n") as box:
        for env, gpus in (("one", "1"), ("two", "2"), ("fixed", "[0]")):
            (box.home / "profiles" / "envs" / f"{env}.yaml").write_text(
                f"image: devenv/pytorch:unused-on-a-bare-host\ngpus: {gpus}\nports:\n  jupyter: {free_port()}\n")
        try:
            yield box.devenv, box.other_pid
        finally:
            for env in ("one", "two", "fixed"):
                box.devenv("down", "bare", "--env", env, "--purge", "--yes")


def test_bare_host_env_sees_only_the_gpu_it_was_given(bare_gpubox):
    devenv, other_pid = bare_gpubox
    up = devenv("up", "bare", "--env", "one", "--detach", "--json")
    assert up.returncode == 0, up.stderr
    assert "Picked GPU 1 (1 free GPU)" in up.stderr
    result = json.loads(up.stdout)
    jupyter = environ_of(int(result["status"]["container"]))
    assert jupyter["CUDA_VISIBLE_DEVICES"] == "1" and jupyter["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert result["status"]["gpus"] == "1"

    # a kernel's child and an exec see the same GPU; status shows it; a re-up keeps it
    ran = devenv("exec", "bare", "--env", "one", "--", "sh", "-c", "echo $CUDA_DEVICE_ORDER:$CUDA_VISIBLE_DEVICES")
    assert ran.returncode == 0 and ran.stdout.strip() == "PCI_BUS_ID:1", ran.stderr
    listed = json.loads(devenv("status", "bare", "--json").stdout)["environments"]
    assert [(e["env"], e["gpus"]) for e in listed] == [("one", "1")]
    again = json.loads(devenv("up", "bare", "--env", "one", "--detach", "--json").stdout)
    assert again["action"] == "reattached" and again["status"]["gpus"] == "1"

    # named GPUs are taken as named, busy or not (as Docker does with device=0)
    fixed = devenv("up", "bare", "--env", "fixed", "--detach", "--json")
    assert fixed.returncode == 0, fixed.stderr
    assert environ_of(int(json.loads(fixed.stdout)["status"]["container"]))["CUDA_VISIBLE_DEVICES"] == "0"

    # two free GPUs asked for, one free: nothing is started, and the busy GPU's process is named
    short = devenv("up", "bare", "--env", "two", "--detach", "--json")
    assert short.returncode == 1, short.stderr
    assert short.stdout == "", "stdout is for the JSON result: the failed preflight goes to stderr"
    error = next(line for line in short.stderr.splitlines() if line.startswith("Error:"))
    assert f"GPU 0 is busy with pid {other_pid}" in error, short.stderr   # the one line says why
    assert "two" not in [e["env"] for e in json.loads(devenv("status", "bare", "--json").stdout)["environments"]]
