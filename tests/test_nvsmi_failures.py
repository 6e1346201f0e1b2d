"""L0: what devenv says about a failing nvidia-smi, from its words and exit code (the outputs the replay's
scenarios print: tests/replay/nvidia-smi says where each comes from; over sshd:
tests/integration/test_gpu_scenarios.py)."""

from __future__ import annotations

import subprocess

import pytest

from devenv.checks import host as hc
from devenv.checks.host import BatchOutput
from devenv.gpu import nvsmi


@pytest.mark.parametrize("output,code,words", [
    ("Failed to initialize NVML: Driver/library version mismatch\n", 18, "kernel module and the user-space driver"),
    ("Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error\n", 255,
     "the GPU at PCI 0000:3B:00.0 is lost"),
    ("", 124, "did not answer within 10 s"),
    ("Failed to initialize NVML: Unknown Error\n", 255, "cannot initialise NVML"),
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", 9, "cannot talk to"),
    ("No devices were found\n", 6, "sees no GPU"),
])
def test_failing_nvidia_smi_is_explained(output, code, words):
    what, remedy = nvsmi.explain_failure(output, code)
    assert words in what and remedy and "see the full error" not in remedy


def test_mig_mode_is_a_warning_per_gpu():
    out = BatchOutput("", "0, Enabled\n1, Disabled\n2, [N/A]\n", "", 0)
    [mig] = hc.judge_mig(out)
    assert mig.id == "gpu.0.mig" and mig.status == "warn" and "MIG instances" in mig.value
    assert hc.judge_mig(BatchOutput("", 'Field "mig.mode.current" is not a valid field to query.\n', "", 2)) == []


def test_preamble_finds_nvidia_smi_off_path_and_cuts_a_hang(tmp_path):
    hung = tmp_path / "nvidia-smi"
    hung.write_text("#!/bin/sh\nsleep 30\n")
    hung.chmod(0o755)
    script = nvsmi.preamble(str(hung), limit_s=1) + "nvidia_smi -L; echo rc=$?"
    done = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, timeout=20,
                          env={"PATH": "/nonexistent"})  # timeout comes from the appended /usr/bin
    assert "rc=124" in done.stdout
