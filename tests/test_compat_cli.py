"""`devenv compat` through click's CliRunner: verdict lines, JSON, exit codes, bad input without a traceback."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from devenv.cli import main


def run(*args: str):
    return CliRunner().invoke(main, ["compat", *args])


@pytest.mark.parametrize("args, code, words", [
    (["--driver", "580.159.04", "--cuda", "12.8", "--gpu-name", "NVIDIA H200", "--torch", "2.8.0+cu128"], 0,
     ["PASS", "Verdict: runs"]),
    (["--driver", "535.54.03", "--cuda", "12.8"], 0,
     ["WARN", "minor-version compatibility", "cudaErrorCallRequiresNewerDriver", ">= 570.26", "runs, with limits"]),
    (["--driver", "525.60.12", "--cuda", "12.8"], 1, ["FAIL", ">= 570.26", "does NOT run"]),
    (["--driver", "575.51.03", "--cuda", "13.0", "--gpu-name", "NVIDIA H100 80GB HBM3"], 1,
     ["cuda-compat-13-0", ">= 580.65.06"]),
    (["--driver", "570.26", "--gpu-cc", "12.0", "--torch", "2.6.0+cu126"], 1,
     ["no kernel image is available", "cu128 (torch 2.7-2.11)"]),
    (["--driver", "570.26", "--gpu-name", "NVIDIA B200", "--torch", "2.5.1+cu124"], 0, ["WARN", "slow first start"]),
], ids=["h200-runs", "minor-version-limits", "below-floor", "forward-compat-remedy", "no-kernel-image", "ptx-jit"])
def test_human_output_and_exit_code(args, code, words):
    result = run(*args)
    assert result.exit_code == code, result.output
    for word in words:
        assert word in result.output, result.output


def test_measured_arch_list_from_the_host():
    result = run("--driver", "580.159.04", "--gpu-name", "NVIDIA H200", "--torch", "2.8.0a0+5228986c39.nv25.05",
                 "--arch-list", "sm_80 sm_86 sm_90 compute_90", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["verdict"] == "pass"


def test_unknown_exits_3_with_a_warning_line():
    result = run("--driver", "700.1", "--cuda", "14.0")
    assert result.exit_code == 3
    assert "Verdict: cannot tell" in result.stdout
    assert result.stderr.startswith("Warning: devenv cannot tell whether this runs")


def test_json_names_verdict_reason_and_remedy():
    result = run("--driver", "520.61.05", "--cuda", "12.8", "--gpu-name", "NVIDIA A100-SXM4-80GB", "--json")
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["verdict"] == "fail" and data["runs"] is False
    assert "below 525.60.13" in data["reason"]
    assert data["requires"] == {"min_driver": "525.60.13", "full_driver": "570.26",
                                "cuda_compat_package": "cuda-compat-12-8"}
    assert any("cuda-compat-12-8" in r for r in data["remedy"])


def test_json_for_a_pytorch_remedy():
    result = run("--driver", "580.65.06", "--gpu-name", "Tesla V100-SXM2-16GB", "--torch", "2.9.0+cu130", "--json")
    data = json.loads(result.stdout)
    assert result.exit_code == 1 and data["verdict"] == "fail"
    assert "cu126" in data["requires"]["torch_builds"]


@pytest.mark.parametrize("args, words", [
    (["--driver", "abc", "--cuda", "12.8"], ["--driver", "not a driver version", "hint:"]),
    (["--driver", "12.8", "--cuda", "12.8"], ["looks like a CUDA version"]),
    (["--driver", "580.65.06", "--cuda", "cu128"], ["--cuda", "did you mean 12.8"]),
    (["--driver", "580.65.06", "--torch", "two"], ["--torch", "2.8.0+cu128"]),
    (["--driver", "580.65.06", "--cuda", "12.8", "--gpu-cc", "nine"], ["--gpu-cc", "9.0"]),
    (["--driver", "580.65.06"], ["nothing to judge"]),
    (["--gpu-cc", "9.0", "--torch", "cu128", "--arch-list", "sm_90,xx_1"], ["--arch-list", "xx_1"]),
    (["--cuda", "12.8", "--arch-list", "sm_90"], ["give --torch too"]),
], ids=["driver-abc", "driver-is-cuda", "cuda-tag", "torch-word", "cc-word", "nothing-to-judge", "arch-junk",
        "arch-without-torch"])
def test_bad_input_is_one_clear_error(args, words):
    result = run(*args)
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert isinstance(result.exception, SystemExit)  # click's usage exit, not an escaped error
    for word in words:
        assert word in result.stderr, result.stderr


def test_help_documents_the_exit_codes():
    result = run("--help")
    assert result.exit_code == 0
    for line in ("0  it runs", "1  it does not run", "2  bad input", "3  cannot tell"):
        assert line in result.output
