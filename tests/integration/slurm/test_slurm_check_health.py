"""`devenv check CLUSTER`'s health section, per compute node, on the test host's real Slurm cluster.

The nodes have no GPU: the section says so ("no GPU on node1"), honestly, and the check passes. For a node with
GPUs, a second login node (a throwaway sshd of this test into the same cluster) gives its sessions the nvidia-smi
REPLAY first on PATH, and srun hands that environment to the probe job: on the node, `nvidia-smi -q` is the
recorded H200 output, or with REPLAY_HEALTH an edited copy of it carrying one fault (tests/fixtures/health,
edited-*: not recordings). Run under the integration lock (see slurm_testing.py).
"""

from __future__ import annotations

import json
import textwrap

import pytest
from monitor_helpers import replay_sshd, trust
from slurm_testing import live_jobs
from sshd_fixture import make_key

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def checks_of(stdout: str) -> dict[str, dict]:
    return {c["id"]: c for c in json.loads(stdout)["checks"]}


def test_nodes_without_a_gpu_say_no_gpu_in_the_health_section(cluster):
    done = cluster.run("check", cluster.host, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    checks = checks_of(done.stdout)
    node = checks["node.job"]["details"]["node"]
    health = checks["gpu.health"]
    assert health["status"] == "no-gpu" and health["value"] == f"no GPU on {node}: no GPU health to judge", health
    assert health["title"] == f"GPU health ({node})" and health["details"]["node"] == node
    assert json.loads(done.stdout)["unhealthy"] is False
    text = cluster.run("check", cluster.host)
    assert text.returncode == 0 and f"no GPU on {node}: no GPU health to judge" in text.stdout + text.stderr
    assert not live_jobs("devenv-check")


def replay_login(cluster, tmp_path, name: str, health: str | None):
    """A login node profile `name` whose sessions' PATH finds the replay (2 GPUs), with REPLAY_HEALTH=health,
    and a GPU environment (`gpus: all`) for it."""
    key = make_key(tmp_path / f"id-{name}")
    env = {"REPLAY_GPUS": "2", "DEVENV_OWNER": cluster.owner, **({"REPLAY_HEALTH": health} if health else {})}
    server = replay_sshd(tmp_path / f"sshd-{name}", key, env=env)
    (cluster.home / "profiles" / "envs" / "gpuenv.yaml").write_text(textwrap.dedent("""\
        description: a GPU environment for the health test (the replay's GPUs)
        image: unused-on-slurm
        gpus: all
        """))
    return server, key


@pytest.mark.parametrize("health", [None, "edited-remap-pending.txt"])
def test_a_replayed_node_gets_the_health_section_and_a_sick_gpu_is_unhealthy(cluster, tmp_path, health):
    server_cm, key = replay_login(cluster, tmp_path, "replaylogin", health)
    with server_cm as server:
        trust(server)
        (cluster.home / "profiles" / "hosts" / "replaylogin.yaml").write_text(textwrap.dedent(f"""\
            description: the test cluster through a login node whose PATH finds the nvidia-smi replay
            ssh:
              hostname: 127.0.0.1
              port: {server.port}
              user: root
              identity_file: {key.path}
            runtime: slurm
            python: {cluster.python}
            default_env: gpuenv
            slurm:
              partition: debug
            """))
        done = cluster.run("check", "replaylogin", "--json")
    report = json.loads(done.stdout)
    checks = checks_of(done.stdout)
    node = checks["node.job"]["details"]["node"]
    assert "gpu.health" not in checks, "the node has (replayed) GPUs: judged, not 'no GPU'"
    for index in (0, 1):
        assert any(c["id"].startswith(f"gpu.{index}.health") for c in report["checks"]), report["checks"]
    if health is None:
        assert checks["gpu.0.health"]["status"] == "pass" and checks["gpu.1.health"]["status"] == "pass"
        assert checks["gpu.0.health"]["title"] == f"GPU 0 health ({node})"
        assert report["unhealthy"] is False and done.returncode != 7
    else:
        sick = [c for c in report["checks"] if c["status"] == "fail" and c["details"].get("unhealthy")]
        assert sick and all(c["details"]["node"] == node for c in sick), report["checks"]
        assert {c["id"].split(".")[1] for c in sick} == {"0", "1"}  # REPLAY_HEALTH: every replayed GPU
        assert "Pending" in sick[0]["details"]["field"] and sick[0]["remedy"]
        assert report["unhealthy"] is True and done.returncode == 7, done.stdout + done.stderr
    assert not live_jobs("devenv-check")
