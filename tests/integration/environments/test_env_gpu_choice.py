"""`gpus: N` end to end through the CLI on the real test host: the environment gets the free GPU, not the busy
one; the choice is in the container's labels and in `status`; `check` lists each GPU free or busy and by whom;
asking for more free GPUs than there are stops `up` with exit 1, naming the busy GPU's process.

What is real: our own sshd on loopback, rootful podman (Debian's 4.3) making the container, CDI device edits
reaching it, ps and /proc reading the other process's user and ancestry. What is replayed: nvidia-smi
(tests/replay/nvidia-smi, a real H200 recording held at a tick where GPU 0 is under load and GPU 1 idle), whose
compute-apps list a real `sleep` of this machine on GPU 0 (someone else's job); and the GPUs themselves: a CDI
spec of our own stands in for nvidia-ctk's (no GPU here), its devices marking the container's environment.
"""

from __future__ import annotations

import json
import secrets
import subprocess

import pytest
from env_testing import podman, podman_env_leftovers, replay_cdi_spec, replay_gpu_host, slim_profile
from sshd_fixture import free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
IMAGE = "devenv-test/pytorch:slim"   # built on podman by the podman_slim_image fixture (env_testing.py)


@pytest.fixture
def gpubox(tmp_path, testhost, podman_slim_image):
    assert podman_slim_image == IMAGE
    token = secrets.token_hex(4)
    with replay_cdi_spec(token), replay_gpu_host(tmp_path, "gpubox", "runtime: docker\nengine: podman\n") as box:
        name = f"gpu-{token}"
        for env, gpus in ((name, "1"), (f"{name}-2", "2")):
            profile = slim_profile(image=IMAGE, ports={"jupyter": free_port(), "ssh": free_port()})
            (box.home / "profiles" / "envs" / f"{env}.yaml").write_text(
                profile.replace("gpus: none", f"gpus: {gpus}"))
        try:
            yield box.devenv, name, box.other_pid, token
        finally:
            podman_env_leftovers(name)


def test_up_takes_the_free_gpu_records_it_and_refuses_when_too_few_are_free(gpubox):
    devenv, env, other_pid, token = gpubox
    user = subprocess.run(["ps", "-o", "user=", "-p", str(other_pid)], capture_output=True, text=True).stdout.strip()
    busy = f"pid {other_pid} ({user}, python3, 1.1 GiB, 100% util)"  # the recording at tick 30

    # check: each GPU free or busy, by whom; and which one `up` would pick
    check = devenv("check", "gpubox", "--env", env, "--json")
    found = {c["id"]: c for c in json.loads(check.stdout)["checks"]}
    assert found["gpu.0.use"]["status"] == "warn" and found["gpu.0.use"]["value"] == f"busy with {busy}"
    assert found["gpu.1.use"]["status"] == "pass" and found["gpu.1.use"]["value"].startswith("free (0% util")
    assert found["gpu.choice"]["status"] == "pass" and found["gpu.choice"]["value"] == "would pick GPU 1"

    # up: GPU 1 reaches the container (its CDI edits), the label records it, status shows it
    up = devenv("up", "gpubox", "--env", env, "--detach", "--json")
    assert up.returncode == 0, up.stderr
    assert "Picked GPU 1 (1 free GPU)" in up.stderr
    [container] = podman("ps", "--filter", f"label=org.devenv.env={env}", "--format", "{{.Names}}").stdout.split()
    inspect = json.loads(podman("inspect", container).stdout)[0]
    assert inspect["Config"]["Labels"]["org.devenv.gpus"] == "1"
    environ = podman("exec", container, "sh", "-c", "tr '\\0' '\\n' </proc/1/environ").stdout
    assert f"DEVENV_CDI_PROOF={token}-gpu1" in environ.splitlines()
    status = devenv("status", "gpubox")
    row = next(line for line in status.stdout.splitlines() if f" {env} " in line)
    assert row.split()[6] == "1", status.stdout            # the GPUS column
    assert json.loads(devenv("status", "gpubox", "--json").stdout)["environments"][0]["gpus"] == "1"
    # again: reattached, although GPU 1 is no longer the only free one it could have picked
    again = json.loads(devenv("up", "gpubox", "--env", env, "--detach", "--json").stdout)
    assert again["action"] == "reattached"

    # two free GPUs asked for, one free: up stops before making anything, naming the busy one
    short = devenv("up", "gpubox", "--env", f"{env}-2", "--detach")
    assert short.returncode == 1, short.stderr
    assert (f"2 free GPUs asked for, but only 1 of 2 on gpubox is free: GPU 0 is busy with {busy}"
            in short.stderr + short.stdout)
    assert "--allow-busy" in short.stderr + short.stdout
    assert podman("ps", "-a", "--filter", f"label=org.devenv.env={env}-2", "-q").stdout.strip() == ""
    assert devenv("down", "gpubox", "--env", env, "--purge", "--yes").returncode == 0
