"""Faults on the real test host: the SSH connection cut in the middle of `up`, ports already taken, a Jupyter
that never answers, and an image build that fails."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import textwrap
import time

import pytest
from env_testing import SLIM_IMAGE, docker, read_url
from jupyter_client import JupyterClient

from devenv.runtimes.docker_runtime import build_container_prefix

pytestmark = pytest.mark.integration


def cut_ssh_connections(pid: int, sshd_port: int) -> int:
    """Kill the TCP connections process pid holds to the test host's sshd (ss -K); how many were cut."""
    out = subprocess.run(["ss", "-tnpH", "state", "established", f"( dport = :{sshd_port} )"],
                         capture_output=True, text=True, check=True).stdout
    ports = [line.split()[2].rsplit(":", 1)[1] for line in out.splitlines() if f"pid={pid}," in line]
    for port in ports:
        subprocess.run(["ss", "-K", "dst", "127.0.0.1", "dport", "=", f":{sshd_port}", "sport", "=", f":{port}"],
                       capture_output=True, text=True)
    return len(ports)


def run_until(proc: subprocess.Popen, marker: str, timeout: float = 120) -> list[str]:
    """Read proc's stderr lines until one contains marker; the lines read."""
    lines = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        if marker in line:
            return lines
    raise AssertionError(f"never saw {marker!r}; stderr so far:\n{''.join(lines)}")


# Building: nothing made yet; Starting: the container exists but was never started (half-made).
@pytest.mark.parametrize("phase", ["==> Building", "==> Starting the environment"])
def test_connection_cut_during_up_then_up_finishes_the_job(test_env, testhost, phase):
    env = test_env.name
    image = f"devenv-test/pytorch:cut-{env}"
    test_env.write_profile(image=image, ports=_free_ports())
    try:
        proc = test_env.popen("up", "testbox", "--env", env, "--detach")
        run_until(proc, phase)
        proc.send_signal(signal.SIGSTOP)  # hold devenv where it is while its connection is cut
        try:
            cut = cut_ssh_connections(proc.pid, testhost.port)
        finally:
            proc.send_signal(signal.SIGCONT)
        first_rc = proc.wait(120)
        stderr = proc.stderr.read()
        assert cut >= 1
        assert first_rc != 0, f"up was not interrupted at {phase!r}; stderr:\n{stderr}"
        assert "connection" in stderr.lower() and "Traceback" not in stderr, stderr
        left = test_env.state() or "absent"
        print(f"interrupted at {phase!r}: exit {first_rc}, container {left}; {stderr.strip().splitlines()[-2:]}")

        again = test_env.run("up", "testbox", "--env", env, "--detach", "--json")
        result = json.loads(again.stdout)
        assert result["status"]["state"] == "running", (left, again.stderr)
        # What the next `up` does depends on where the cut left the host, never on the laptop's memory.
        expected = {"absent": "created", "created": "started", "running": "reattached"}[left]
        if left == "created":  # half-made: made but never started
            assert "Finishing the environment" in again.stderr
            if "making it again" in again.stderr:  # it was made with a ulimit this host refuses (see notes)
                expected = "created"
        assert result["action"] == expected, (left, result["action"], again.stderr)
        assert test_env.containers() == [test_env.container]
        ready = test_env.run("exec", "testbox", "--env", env, "--", "devenv-ready")
        assert "jupyter ok" in ready.stdout and "sshd ok" in ready.stdout
    finally:
        test_env.remove_everything()  # the container first: an image in use cannot be removed
        docker("rmi", image)


def _free_ports() -> dict[str, int]:
    from sshd_fixture import free_port
    return {"jupyter": free_port(), "ssh": free_port()}


def test_taken_ports_on_host_and_laptop_are_replaced_by_free_ones(test_env):
    env = test_env.name
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))   # the test host is this machine: one port is taken on both sides
    blocker.listen(1)
    taken = blocker.getsockname()[1]
    try:
        test_env.write_profile(ports={"jupyter": taken, "ssh": _free_ports()["ssh"]})
        up = test_env.run("up", "testbox", "--env", env, "--detach", "--json")
        result = json.loads(up.stdout)
        published = result["status"]["ports"]["jupyter"]
        assert published != taken
        assert any(f"127.0.0.1:{taken} is taken on testbox" in note for note in result["notes"])

        proc = test_env.popen("jupyter", "testbox", "--env", env)   # the same port is the preferred local one
        try:
            url = read_url(proc)
            assert f"127.0.0.1:{taken}/" not in url
            with JupyterClient(url) as jc:
                assert jc.api("/api/status").status_code == 200
        finally:
            proc.terminate()
            proc.wait(15)
    finally:
        blocker.close()


def test_jupyter_never_answering_is_a_bounded_wait_that_shows_its_logs(test_env):
    env = test_env.name
    image = f"devenv-test/pytorch:hang-{env}"
    dockerfile = textwrap.dedent(f"""\
        FROM {SLIM_IMAGE}
        RUN printf '#!/bin/sh\\necho "jupyter: loading extension stuck_ext (waiting on a lock)"\\nexec sleep 1d\\n' \\
              > /opt/venv/bin/jupyter && chmod 0755 /opt/venv/bin/jupyter
        """)
    built = subprocess.run(["docker", "build", "-q", "-t", image, "-"], input=dockerfile, text=True,
                           capture_output=True, env={**os.environ, "DOCKER_BUILDKIT": "0"}, timeout=120)
    assert built.returncode == 0, built.stderr
    try:
        profile = test_env.home / "profiles" / "envs" / f"{env}.yaml"
        text = profile.read_text().replace(f"image: {SLIM_IMAGE}", f"image: {image}")
        profile.write_text(re.sub(r"build:\n(  .*\n)+", "", text))   # a pulled-style image: used as it is
        up = test_env.run("up", "testbox", "--env", env, "--detach", "--ready-timeout", "6", check=False)
        assert up.returncode == 1, up.stderr
        assert "did not answer within 6 s" in up.stderr
        assert "jupyter down" in up.stderr            # what the probe saw
        assert "loading extension stuck_ext" in up.stderr   # the environment's own log, shown
        assert "sshd down" not in up.stderr           # sshd did answer: the message blames the right one
        assert "Traceback" not in up.stderr
    finally:
        test_env.remove_everything()
        docker("rmi", image)


@pytest.mark.parametrize("way", ["copy", "commit"])
def test_failing_image_build_names_the_step(test_env, tmp_path, way):
    """Either way of making the venv (the whole Dockerfile, or run + commit: DEVENV_BUILD_VENV) names the step
    that failed, with pip's own words, and leaves no image (nor a build container)."""
    env = test_env.name
    test_env.environ["DEVENV_BUILD_VENV"] = way
    wheelhouse = tmp_path / "wheels"
    wheelhouse.mkdir()
    (wheelhouse / "placeholder-0.0.0-py3-none-any.whl").write_bytes(b"")   # JupyterLab is missing
    test_env.write_profile(image=f"devenv-test/pytorch:broken-{env}")
    build = test_env.run("image", "build", "testbox", "--env", env, "--offline", "--wheelhouse", str(wheelhouse),
                         check=False, timeout=300)
    assert build.returncode == 1, build.stderr
    step = {"copy": r"Step \d+/\d+ : RUN sh /tmp/devenv-build/install-python.sh",
            "commit": r"Step venv: install-python.sh and install-extra.sh pip in a container"}[way]
    assert re.search(rf"image build failed at {step}", build.stderr), build.stderr
    assert "No matching distribution found for jupyterlab" in build.stderr
    assert "Traceback" not in build.stderr
    assert docker("image", "inspect", f"devenv-test/pytorch:broken-{env}").returncode != 0
    # its own build container (other tests build beside it: theirs are named after their images)
    made = docker("ps", "-a", "--no-trunc", "--format", "{{.Names}} {{.Command}}").stdout
    prefix = build_container_prefix(f"devenv-test/pytorch:broken-{env}")
    assert not [line for line in made.splitlines() if line.startswith(prefix)], made
