"""`devenv sanity` against the real test host: over SSH on the bare host (its python has CPU torch), and
inside a Docker environment through the runtime (the slim test image has python but no torch)."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.integration


def test_sanity_over_ssh_on_the_host_and_inside_the_environment(test_env):
    env = test_env.name

    # The bare host, over SSH: the CPU smoke runs, judged live, and says no GPU was proven (exit 4).
    host = test_env.run("sanity", "testbox", "--on-host", "--only", "probe", "--json", check=False)
    assert host.returncode == 4, host.stderr
    body = json.loads(host.stdout)
    assert body["verdict"]["status"] == "no-gpu" and body["host"] == "testbox"
    assert [r["check"] for r in body["report"]["results"]] == ["fp16_underflow_probe"]
    assert body["saved_to"] and (test_env.home / "state" / "sanity" / "testbox").is_dir()

    # Inside the environment: the program is put into the container and run with its python3, which has
    # no torch in the slim image: one clear error with a hint, no traceback.
    test_env.run("up", "testbox", "--env", env, "--detach", "--json")
    inside = test_env.run("sanity", "testbox", "--env", env, "--no-save", check=False)
    assert inside.returncode == 1, inside.stderr
    assert "Error: PyTorch is not importable with 'python3' on testbox" in inside.stderr
    assert "Hint: set `python:`" in inside.stderr and "Traceback" not in inside.stderr
