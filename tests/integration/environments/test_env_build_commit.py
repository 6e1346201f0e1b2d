"""The venv made by run + commit on Docker (services/environments/docker/images.py, DEVENV_BUILD_VENV=commit):
a signal while the venv is made leaves no build container and the next build finishes; the image keeps the
runtime stage's entrypoint and env (no build argument leaks into it), no wheel or build file is in any of its
layers, an unchanged spec reuses the committed image and a changed pip list makes it again."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from env_testing import docker

from devenv.runtimes.docker_runtime import build_container_prefix

pytestmark = pytest.mark.integration

IMAGE = "devenv-test/pytorch:build-commit"
DRIVER = "/tmp/devenv-build-run.sh"


def build_containers() -> set[str]:
    """Containers running (or left by) a run + commit build of this test's image on this dockerd (other tests'
    builds run beside it: theirs are named after their own images)."""
    out = docker("ps", "-a", "--no-trunc", "--format", "{{.ID}} {{.Names}} {{.Command}}").stdout
    return {line.split()[0] for line in out.splitlines()
            if DRIVER in line and line.split()[1].startswith(build_container_prefix(IMAGE))}


def lines_of(stream) -> queue.Queue:
    got: queue.Queue = queue.Queue()

    def pump() -> None:
        for line in stream:
            got.put(line)
        got.put(None)
    threading.Thread(target=pump, daemon=True).start()
    return got


def wait_for_line(got: queue.Queue, start: str, seen: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = got.get(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            break
        if line is None:
            break
        seen.append(line)
        if line.strip().startswith(start):
            return
    raise AssertionError(f"no line starting {start!r} in {timeout} s:\n{''.join(seen)}")


def layer_dirs(image: str) -> list[Path]:
    data = json.loads(docker("image", "inspect", "-f", "{{json .GraphDriver.Data}}", image).stdout)
    dirs = [data["UpperDir"], *(data.get("LowerDir") or "").split(":")]
    return [Path(d) for d in dirs if d]


def test_signal_while_the_venv_is_made_then_the_image_is_whole_clean_and_reused(test_env):
    env = test_env.name
    profile = test_env.home / "profiles" / "envs" / f"{env}.yaml"
    profile.write_text(profile.read_text().replace("image: devenv-test/pytorch:slim", f"image: {IMAGE}")
                       + "pip:\n  - inflection==0.5.1\n")
    test_env.environ["DEVENV_BUILD_VENV"] = "commit"
    before = build_containers()

    proc = test_env.popen("image", "build", "testbox", "--env", env, "-q")
    got, seen = lines_of(proc.stderr), []
    try:
        wait_for_line(got, "Step venv: install-python.sh", seen, timeout=600)
        deadline = time.monotonic() + 120   # the container is created right after the step's line
        while not (build_containers() - before) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert build_containers() - before, "".join(seen)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=120)
    except BaseException:
        proc.kill()
        raise
    proc.stdout.close()
    output = "".join(seen) + "".join(iter(lambda: got.get(timeout=30) or "", ""))
    assert code == 128 + signal.SIGTERM, f"exit {code}:\n{output}"
    assert "Traceback" not in output, output
    assert build_containers() - before == set(), "the build container outlived the signal"

    # a build container a lost connection left behind (ended): the next build removes it
    # (and another image's ended one is left alone: it may be that build's between its run and its commit)
    left = f"{build_container_prefix(IMAGE)}left"
    other = f"{build_container_prefix(IMAGE + '-other')}left"
    for name in (left, other):
        docker("create", "--name", name, "--entrypoint", "/bin/true", "devenv-test/pytorch:slim")
        assert docker("container", "inspect", name).returncode == 0
    first = test_env.run("image", "build", "testbox", "--env", env, "-q", timeout=900)
    assert "Step venv: install-python.sh" in first.stderr, first.stderr
    assert build_containers() - before == set()
    assert docker("container", "inspect", left).returncode != 0, "the ended build container was left"
    assert docker("container", "inspect", other).returncode == 0, "another image's build container was removed"
    docker("rm", "-f", other)
    config = json.loads(docker("image", "inspect", "-f", "{{json .Config}}", IMAGE).stdout)
    assert config["Entrypoint"] == ["/usr/local/bin/devenv-entrypoint"] and not config.get("Cmd"), config
    assert config["WorkingDir"] == "/workspace" and not config.get("User"), config
    names = {item.split("=", 1)[0] for item in config["Env"]}
    assert "VIRTUAL_ENV" in names and not names & {"DEVENV_PIP", "OFFLINE", "TORCH_VERSION", "BASE_IMAGE"}, names
    assert config["Labels"]["org.devenv.env"] == env and config["Labels"]["org.devenv.build-cache"], config
    # no wheel of the wheelhouse and none of the build's files in any layer (the test host's dockerd is local)
    # (the Dockerfile's own stages COPY their scripts to /tmp/devenv-build and delete them in a later layer: the
    # whiteouts; the committed layer, the first, holds nothing of the build, not even a whiteout)
    layers = layer_dirs(IMAGE)
    assert not list((layers[0] / "tmp").glob("devenv-build*")), sorted((layers[0] / "tmp").iterdir())
    wheelhouse = Path(test_env.environ["DEVENV_WHEELHOUSE"])   # the test host's (torch): sent with every build
    wheels = {p.name for p in wheelhouse.iterdir() if p.name.endswith(".whl")}
    assert wheels, wheelhouse
    for layer in layers:
        assert not [p for p in layer.rglob("*.whl") if p.name in wheels], layer
        for name in ("devenv-build-args", "devenv-build-run.sh", "devenv-build/install-python.sh"):
            assert not (layer / "tmp" / name).exists(), layer / "tmp" / name
    ran = subprocess.run(["docker", "run", "--rm", "--entrypoint", "/opt/venv/bin/python", IMAGE, "-c",
                          "import inflection, jupyterlab; print(inflection.__version__)"],
                         capture_output=True, text=True, timeout=300)
    assert ran.stdout.strip() == "0.5.1", ran.stderr

    # unchanged (under another tag, which the build must make): the committed image is used again, its label
    # finds it (the layer cache does not cover a commit)
    image_id = docker("image", "inspect", "-f", "{{.Id}}", IMAGE).stdout.strip()
    profile.write_text(profile.read_text().replace(f"image: {IMAGE}", f"image: {IMAGE}-again"))
    again = test_env.run("image", "build", "testbox", "--env", env, "-q", timeout=900)
    assert "Step venv: the image committed before, unchanged" in again.stderr, again.stderr
    assert docker("image", "inspect", "-f", "{{.Id}}", f"{IMAGE}-again").stdout.strip() == image_id

    # a changed pip list: the image is made again (its content label and the build's fingerprint both change)
    profile.write_text(profile.read_text().replace("inflection==0.5.1", "inflection==0.5.0"))
    changed = test_env.run("image", "build", "testbox", "--env", env, "-q", timeout=900)
    assert "Step venv: install-python.sh" in changed.stderr, changed.stderr
    assert "unchanged" not in changed.stderr, changed.stderr
    ran = subprocess.run(["docker", "run", "--rm", "--entrypoint", "/opt/venv/bin/python", f"{IMAGE}-again", "-c",
                          "import inflection; print(inflection.__version__)"], capture_output=True, text=True,
                         timeout=300)
    assert ran.stdout.strip() == "0.5.0", ran.stderr


@pytest.fixture(autouse=True)
def _remove_the_images():
    yield
    docker("rmi", f"{IMAGE}-again", IMAGE)   # their env's name is this test's: no later build reuses them
    left = docker("ps", "-aq", "--filter", f"name={build_container_prefix(IMAGE)}left").stdout.split()   # the test's
    if left:
        docker("rm", "-f", *left)
