"""`devenv sanity` end to end through click, on a host profile for this machine (runtime: host, local: true),
running the real program on CPU torch: the exit codes, the live lines, the saved report, the comparison."""

from __future__ import annotations

import json
import sys

import pytest
from click.testing import CliRunner

from devenv.cli import main


@pytest.fixture
def cpu_box(isolated_home):
    hosts = isolated_home / "profiles" / "hosts"
    hosts.mkdir(parents=True)
    (hosts / "cpu-box.yaml").write_text(
        f"description: this machine, bare host runtime\nlocal: true\nruntime: host\npython: {sys.executable}\n"
        "default_env: cpu\n")
    return "cpu-box"


def test_sanity_on_a_host_without_gpu_says_so_and_exits_4(local_torch, cpu_box, isolated_home):
    done = CliRunner().invoke(main, ["sanity", cpu_box, "--only", "probe"])
    assert done.exit_code == 4, done.output
    assert "[1/1] fp16 underflow probe with GradScaler" in done.output  # live progress
    assert "PASS  fp16 underflow probe: gradients survive" in done.output  # judged as it arrived
    assert "no GPU: nothing about a GPU was proven" in done.output
    saved = list((isolated_home / "state" / "sanity" / cpu_box).glob("*.json"))
    assert len(saved) == 1 and json.loads(saved[0].read_text())["verdict"]["status"] == "no-gpu"


def test_injected_fault_exits_1_and_names_the_threshold_source(local_torch, cpu_box):
    done = CliRunner().invoke(main, ["sanity", cpu_box, "--only", "probe", "--inject", "fp16-no-scaler", "--no-save"])
    assert done.exit_code == 1, done.output
    assert "FAIL  fp16 underflow probe: gradients survive (WITHOUT GradScaler)" in done.output
    assert "threshold from: fp16's smallest subnormal" in done.output


def test_json_output_and_comparison_with_the_last_run(local_torch, cpu_box):
    runner = CliRunner()
    first = runner.invoke(main, ["sanity", cpu_box, "--only", "matmul", "--json"])
    assert first.exit_code == 4, first.output
    second = runner.invoke(main, ["sanity", cpu_box, "--only", "matmul", "--json", "--compare-last"])
    body = json.loads(second.stdout)
    assert body["verdict"]["status"] == "no-gpu" and body["saved_to"].endswith(".json")
    metrics = {row["metric"] for row in body["comparison"]["rows"]}
    assert {"matmul fp32", "matmul bf16"} <= metrics


def test_missing_python_is_one_error_line_with_a_hint(cpu_box):
    done = CliRunner().invoke(main, ["sanity", cpu_box, "--python", "/nonexistent/python3"])
    assert done.exit_code == 1
    assert "Error: python '/nonexistent/python3' was not found" in done.output
    assert "Hint: set `python:` in the host profile" in done.output


def test_nodes_on_a_host_that_is_not_a_slurm_cluster_is_bad_input(cpu_box):
    done = CliRunner().invoke(main, ["sanity", cpu_box, "--nodes", "2"])
    assert done.exit_code == 2, done.output
    assert "--nodes needs a Slurm cluster" in done.output and "runtime: slurm" in done.output
