"""The test host itself works: OpenSSH reaches the dedicated sshd with the pinned host key (and refuses a
wrong one), dockerd runs the base image, and the no-docker user is really refused by dockerd."""

from __future__ import annotations

import shlex
import subprocess

import docker
import pytest
from slurm_clusters import CLUSTERS

from devenv.config.profiles import load_host
from testhost import testhost, testhost_env, use_testhost  # noqa: F401  (fixtures)

pytestmark = pytest.mark.integration


def run(argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def test_openssh_logs_in_with_the_pinned_host_key(testhost):
    result = run(testhost.ssh_argv() + ["id", "-un"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "root"


def test_openssh_refuses_a_host_key_that_does_not_match(testhost, tmp_path):
    other = tmp_path / "other_host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True,
                   stdin=subprocess.DEVNULL)
    wrong = tmp_path / "known_hosts"
    key_type, key = other.with_suffix(".pub").read_text().split()[:2]
    wrong.write_text(f"[127.0.0.1]:{testhost.port} {key_type} {key}\n")
    result = run(testhost.ssh_argv(known_hosts=wrong) + ["true"])
    assert result.returncode == 255
    assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in result.stderr


def test_docker_runs_the_base_image_over_the_local_socket(testhost):
    client = docker.from_env(timeout=120)
    try:
        output = client.containers.run(testhost.base_image, ["python3", "-c", "print(6 * 7)"], remove=True)
    finally:
        client.close()
    assert output == b"42\n"


def test_root_on_the_test_host_can_use_docker(testhost):
    result = run(testhost.ssh_argv() + ["docker", "image", "inspect", "--format", "{{.Id}}",
                                        testhost.base_image])
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("sha256:")


def test_the_nodocker_user_is_refused_by_dockerd(testhost):
    result = run(testhost.ssh_argv(testhost.nodocker_alias) + ["id -un; docker info"])
    assert result.stdout.splitlines()[0] == testhost.nodocker_user
    assert result.returncode != 0
    assert "permission denied" in result.stderr.lower()


def test_the_devenv_home_holds_both_host_profiles(use_testhost, testhost):
    box = load_host(testhost.alias)
    assert box.ssh is not None and box.ssh.alias == testhost.alias
    assert box.runtime == "docker"
    nodocker = load_host(testhost.nodocker_alias)
    assert nodocker.ssh is not None and nodocker.ssh.alias == testhost.nodocker_alias


@pytest.mark.slurm
@pytest.mark.parametrize("slurm_cluster", CLUSTERS, ids=[c.group for c in CLUSTERS])
def test_slurm_cluster_runs_one_step_on_both_nodes_through_the_login_node(testhost, slurm_cluster):
    """Each Slurm cluster testhost/setup starts: two compute nodes, reached from the test sshd (the login node)
    through the cluster's own alias; the second cluster's login port gives its logins its SLURM_CONF, so its srun
    runs on node3 and node4 with its own job ids (from 200000, never one of the first cluster's)."""
    result = run(testhost.ssh_argv(slurm_cluster.alias) + [
        "srun", "--nodes=2", "--ntasks=2", "--label", "--time=1", "sh", "-c",
        shlex.quote('echo "$SLURMD_NODENAME $SLURM_JOB_ID"')], timeout=120)
    assert result.returncode == 0, result.stderr
    lines = sorted(result.stdout.split("\n")[:-1])
    assert [line.split()[:2] for line in lines] == [["0:", slurm_cluster.nodes[0]], ["1:", slurm_cluster.nodes[1]]]
    job_id = int(lines[0].split()[2])
    assert job_id >= 200000 if slurm_cluster.second else job_id < 200000, job_id


@pytest.mark.slurm
def test_the_devenv_home_holds_the_cluster_profile_with_a_python_for_jupyter(use_testhost, testhost):
    """testhost/setup writes `testcluster` (login node = the test sshd) whose python runs JupyterLab and torch
    on the compute nodes (setup once defined this profile but never wrote it, and `up` found no JupyterLab)."""
    cluster = load_host("testcluster")
    assert cluster.runtime == "slurm" and cluster.ssh is not None and cluster.ssh.alias == testhost.alias
    assert cluster.slurm is not None and cluster.slurm.partition == "debug"
    probe = "import importlib.metadata as m; print(m.version('jupyterlab'), m.version('torch'))"
    result = run(testhost.ssh_argv() + [shlex.join(["srun", "--nodes=1", "--time=1", cluster.python, "-c", probe])],
                 timeout=120)
    assert result.returncode == 0, result.stderr
    jupyterlab, torch = result.stdout.split()
    assert jupyterlab.startswith("4.") and torch.startswith("2.")
