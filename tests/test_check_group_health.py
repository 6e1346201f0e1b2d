"""`devenv check @group` where one host has a sick GPU: two real sshds on this machine whose sessions find the
nvidia-smi REPLAY on PATH (tests/replay/nvidia-smi), one playing the H200's real `nvidia-smi -q`, the other an
edited copy with a pending row remap (tests/fixtures/health/edited-remap-pending.txt: not a recording). The
group's verdict names the sick host and its finding, and the exit code is the health gate's (7)."""

from __future__ import annotations

import json
from contextlib import ExitStack

import pytest
from click.testing import CliRunner
from monitor_helpers import REPLAY_DIR, replay_sshd, trust
from sshd_fixture import make_key

from devenv.cli import main
from devenv.remote.pool import close_all

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def ward(isolated_home, tmp_path):
    """Group @ward: gpu-well (healthy replay) and gpu-sick (GPU 0 with a row remap pending)."""
    key = make_key(tmp_path / "id")
    hosts = isolated_home / "profiles" / "hosts"
    hosts.mkdir(parents=True)
    with ExitStack() as stack:
        for name, health in (("gpu-well", None), ("gpu-sick", "edited-remap-pending.txt")):
            env = {"REPLAY_GPUS": "1", "REPLAY_TICK": "5", **({"REPLAY_HEALTH": health} if health else {})}
            server = stack.enter_context(replay_sshd(tmp_path / name, key, env=env))
            trust(server)
            (hosts / f"{name}.yaml").write_text(
                f"description: {name}, a replayed H200 over a real sshd\nssh:\n  hostname: 127.0.0.1\n"
                f"  port: {server.port}\n  user: root\n  identity_file: {key.path}\n  connect_timeout: 10\n"
                f"runtime: host\npython: {REPLAY_DIR / 'sanity-python'}\ndefault_env: cuda\ngroups: [ward]\n")
        yield
        close_all()


def test_check_of_a_group_names_the_host_with_the_sick_gpu(ward):
    done = CliRunner().invoke(main, ["check", "@ward", "--json"])
    body = json.loads(done.stdout)
    assert set(body["hosts"]) == {"gpu-well", "gpu-sick"}
    assert body["hosts"]["gpu-sick"]["unhealthy"] is True and body["hosts"]["gpu-well"]["unhealthy"] is False
    verdict = body["verdict"]
    assert verdict["status"] == "unhealthy" and list(verdict["unhealthy"]) == ["gpu-sick"]
    assert verdict["unhealthy"]["gpu-sick"][0] == "GPU 0 health: Remapped Rows > Pending: Yes"
    assert verdict["ready"] == ["gpu-well"] and verdict["failed"] == [] and verdict["unreachable"] == {}
    assert "UNHEALTHY gpu-sick: GPU 0 health: Remapped Rows > Pending: Yes" in verdict["summary"]
    assert done.exit_code == 7, done.output

    text = CliRunner().invoke(main, ["check", "@ward"])
    assert text.exit_code == 7, text.output
    [line] = [line for line in text.output.splitlines() if line.startswith("Verdict: ")]
    assert "UNHEALTHY gpu-sick: GPU 0 health: Remapped Rows > Pending: Yes" in line, line
    assert line.startswith("Verdict: 1 of 2 ready (gpu-well); UNHEALTHY gpu-sick: "), line
