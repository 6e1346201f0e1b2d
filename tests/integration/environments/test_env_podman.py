"""The same environment on podman (Debian's 4.3, rootful, beside Docker on the test host), through the CLI as a
user drives it: the engine is found by what answers on the other end of `podman system dial-stdio`, the container
is podman's (Docker never sees it), a Jupyter kernel runs code through devenv's tunnel, OpenSSH gets in, and
`down --purge` leaves nothing. Then GPUs the podman way: a CDI spec on the host, and devenv's request for
`gpus: "0"` reaching the container as CDI device edits (a spec of our own stands in for nvidia-ctk's; no GPU here).
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest
from env_testing import PodmanEnv, base_environ, docker_names, podman, read_url
from jupyter_client import JupyterClient
from sshd_fixture import free_port

from testhost import apply_testhost_env

pytestmark = pytest.mark.integration
HOST = "testbox-podman"


@pytest.fixture
def podman_env(testhost, podman_slim_image, monkeypatch, tmp_path) -> PodmanEnv:
    applied = apply_testhost_env(monkeypatch, testhost.env, tmp_path)
    home = Path(applied["DEVENV_HOME"])
    env = PodmanEnv(f"pod-{secrets.token_hex(2)}", home, base_environ(applied, home))
    env.write_profile(ports={"jupyter": free_port(), "ssh": free_port()})
    yield env
    env.remove_everything()


def test_environment_on_podman_end_to_end(podman_env):
    env = podman_env.name
    up = podman_env.run("up", HOST, "--env", env, "--detach", "--json")
    result = json.loads(up.stdout)
    assert result["action"] == "created" and result["status"]["state"] == "running", up.stderr

    # podman made it, Docker never saw it; ports on the host's loopback only.
    [name] = podman_env.containers()
    assert name not in docker_names()
    inspect = json.loads(podman("inspect", name, check=True).stdout)[0]
    bindings = [b for bs in inspect["NetworkSettings"]["Ports"].values() for b in (bs or [])]
    assert bindings and all(b["HostIp"] == "127.0.0.1" for b in bindings)
    assert inspect["Config"]["Labels"]["org.devenv.env"] == env

    # `check` says which engine devenv uses there.
    check = podman_env.run("check", HOST, "--env", env, "--json", check=False)
    engine = next(r for r in json.loads(check.stdout)["checks"] if r["id"] == "engine")
    assert engine["status"] == "pass" and engine["value"].startswith("podman 4.")
    network = next(r for r in json.loads(check.stdout)["checks"] if r["id"] == "engine.network")
    assert network["status"] == "pass" and "slirp4netns" in network["value"]    # testhost installs it

    # A real Jupyter kernel through devenv's tunnel.
    proc = podman_env.popen("jupyter", HOST, "--env", env)
    try:
        url = read_url(proc)
        with JupyterClient(url) as jc:
            run = jc.execute(jc.start_kernel(), "import socket\nprint(6 * 7)")
        assert run.status == "ok" and run.stdout == "42\n", run
    finally:
        proc.terminate()
        assert proc.wait(15) == 0, proc.stderr.read()

    # OpenSSH into the podman container, through devenv's entry.
    shell = podman_env.run("ssh", HOST, "--env", env, "--", "cat /proc/1/cmdline | tr '\\0' ' '", timeout=60)
    assert "devenv-entrypoint" in shell.stdout

    # A second `up` reattaches; `down --purge` leaves nothing on podman.
    again = json.loads(podman_env.run("up", HOST, "--env", env, "--detach", "--json").stdout)
    assert again["action"] == "reattached"
    podman_env.run("down", HOST, "--env", env, "--purge", "--yes")
    assert podman_env.containers() == [] and podman_env.volumes() == []


CDI_SPEC = """\
cdiVersion: "0.3.0"
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    env: ["DEVENV_CDI_PROOF={token}-gpu0"]
    deviceNodes:
    - path: /dev/zero
- name: all
  containerEdits:
    env: ["DEVENV_CDI_PROOF={token}-all"]
    deviceNodes:
    - path: /dev/zero
"""


def test_gpus_reach_a_podman_container_as_cdi_devices(use_testhost, podman_slim_image):
    """devenv asks podman for `gpus: "0"` by CDI name, through podman's own create API: the spec's edits for
    device 0 (and only those) land in the container. podman's Docker-compatible create would have dropped them."""
    from devenv.config import profiles
    from devenv.env.spec import ContainerRequest
    from devenv.remote.pool import get_connection
    from devenv.runtimes.docker_runtime import DockerRuntime

    token = secrets.token_hex(4)
    spec_path = Path("/etc/cdi") / f"devenv-test-{token}.yaml"
    spec_path.parent.mkdir(exist_ok=True)
    spec_path.write_text(CDI_SPEC.format(token=token))
    host = profiles.load_host(HOST)
    runtime = DockerRuntime.connect(get_connection(host), host.name, False, host.engine, host.gpu_devices)
    name = f"devenv-cdi-{token}"
    try:
        assert runtime.engine.name == "podman"
        for gpus, expected in (("0", f"{token}-gpu0"), ("none", "")):
            request = ContainerRequest(name=f"{name}-{gpus}", image=podman_slim_image,
                                       labels={"org.devenv.test": token},
                                       environment={"DEVENV_JUPYTER": "0", "DEVENV_SSHD": "0"}, ports={},
                                       volumes={}, shm_size="64m", gpus=gpus, hostname="cdi", ulimits={})
            container = runtime.create(request)
            runtime.start(container)
            # CDI edits go into the container's OCI spec: the environment of its first process shows them.
            code, out, _err = runtime.exec(container, ["sh", "-c", "tr '\\0' '\\n' </proc/1/environ | "
                                                       "sed -n 's/^DEVENV_CDI_PROOF=//p'"])
            assert (code, out.strip()) == (0, expected)
    finally:
        spec_path.unlink()
        for gpus in ("0", "none"):
            podman("rm", "-f", f"{name}-{gpus}")
        runtime.close()


def test_volumes_of_other_environments_are_never_listed_as_ours(use_testhost, podman_slim_image):
    """podman 4.3 ORs several label filters on volumes: devenv's own check keeps `down --purge` of one
    environment from listing (and deleting) the volumes of every other one."""
    from devenv.config import profiles
    from devenv.remote.pool import get_connection
    from devenv.runtimes.docker_runtime import DockerRuntime

    token = secrets.token_hex(3)
    mine, other = f"devenv-vol-{token}-mine", f"devenv-vol-{token}-other"
    podman("volume", "create", "--label", "org.devenv.managed=1", "--label", f"org.devenv.env={token}-mine", mine,
           check=True)
    podman("volume", "create", "--label", "org.devenv.managed=1", "--label", f"org.devenv.env={token}-other", other,
           check=True)
    host = profiles.load_host(HOST)
    runtime = DockerRuntime.connect(get_connection(host), host.name, False, host.engine)
    try:
        listed = runtime.list_volumes({"org.devenv.managed": "1", "org.devenv.env": f"{token}-mine"})
        assert listed == [mine]
    finally:
        runtime.close()
        podman("volume", "rm", "-f", mine, other)
