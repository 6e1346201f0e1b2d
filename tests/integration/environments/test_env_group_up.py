"""`devenv up @group`: the host is chosen by free GPUs, then by the image being there; the choice is said with
every host passed over and why, a re-`up @group` returns to it, and no host fitting is one message naming each
host's reason. Through the real CLI, each `up` a real one.

What is real: the sshds (the test host's with dockerd and podman, and two of our own on loopback), SSH, docker,
the bare-host environment's Jupyter, ps and /proc, a `sleep` of this machine as someone's job on GPU 0. What is
replayed: the two GPU hosts' nvidia-smi (tests/replay, a real H200 recording held where GPU 0 is under load).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from env_testing import REPLAY_UUID0, REPO, docker
from monitor_helpers import replay_sshd
from sshd_fixture import free_port, make_key

from testhost import apply_testhost_env

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


class Laptop:
    def __init__(self, home: Path, environ: dict[str, str]):
        self.home, self.environ = home, environ

    def devenv(self, *args: str) -> subprocess.CompletedProcess:
        done = subprocess.run([sys.executable, "-m", "devenv", *args], capture_output=True, text=True, timeout=600,
                              env=self.environ, cwd=REPO, input="")
        print(f"$ devenv {' '.join(args)} -> {done.returncode}\n{done.stderr[-3000:]}")
        assert "Traceback" not in done.stderr and done.returncode != 70, done.stderr
        return done

    def host(self, name: str, text: str) -> None:
        (self.home / "profiles" / "hosts" / f"{name}.yaml").write_text(text)

    def env(self, name: str, text: str) -> None:
        (self.home / "profiles" / "envs" / f"{name}.yaml").write_text(text)


@pytest.fixture
def laptop(testhost, monkeypatch, tmp_path) -> Laptop:
    applied = apply_testhost_env(monkeypatch, testhost.env, tmp_path)
    environ = {k: v for k, v in os.environ.items() if not k.startswith("DEVENV_") and k != "SSH_AUTH_SOCK"}
    environ.update(applied)
    environ.update({"DEVENV_OWNER": f"grp{secrets.token_hex(2)}", "PYTHONUNBUFFERED": "1"})
    environ.pop("SSH_AUTH_SOCK", None)
    return Laptop(Path(applied["DEVENV_HOME"]), environ)


def placement_lines(stderr: str) -> list[str]:
    return [line.removeprefix("==> ") for line in stderr.splitlines()
            if line.startswith(("==> Chose", "==> Passed over", "==> Returning to"))]


def test_up_group_takes_the_host_with_free_gpus(laptop, host_python, tmp_path):
    job = subprocess.Popen(["sleep", "600"])
    try:
        apps = tmp_path / "apps.csv"
        apps.write_text(f"{job.pid}, python3, 1130, {REPLAY_UUID0}\n")
        key = make_key(tmp_path / "id_ed25519")
        one_gpu = replay_sshd(tmp_path / "one", key, env={"REPLAY_GPUS": "1", "REPLAY_TICK": "30",
                                                          "REPLAY_APPS": str(apps)})
        two_gpus = replay_sshd(tmp_path / "two", key, env={"REPLAY_GPUS": "2", "REPLAY_TICK": "30",
                                                           "REPLAY_APPS": str(apps)})
        with one_gpu, two_gpus:
            with open(laptop.environ["DEVENV_KNOWN_HOSTS"], "a") as known:
                known.write(one_gpu.known_hosts_line() + two_gpus.known_hosts_line())
            for name, server in (("busy", one_gpu), ("half", two_gpus)):
                laptop.host(name, f"ssh:\n  hostname: 127.0.0.1\n  port: {server.port}\n  user: root\n"
                                  f"  identity_file: {key.path}\n  connect_timeout: 5\nruntime: host\n"
                                  f"python: {host_python}\ngroups: [gpus]\n")
            laptop.host("cpubox", "ssh:\n  alias: testbox\nruntime: docker\ngroups: [gpus]\n")
            laptop.env("one", f"image: devenv/pytorch:unused-on-a-bare-host\ngpus: 1\nports:\n"
                              f"  jupyter: {free_port()}\n")

            none_fits = laptop.devenv("up", "@gpus", "--env", "one", "--gpus", "2", "--detach")
            assert none_fits.returncode == 1
            [error] = [line for line in none_fits.stderr.splitlines() if line.startswith("Error:")]
            assert error.startswith("Error: no host of @gpus can take it (2 free GPUs needed): ")
            assert f"busy: 0 of 1 GPU free, 2 needed (GPU 0: root python3 pid {job.pid})" in error
            assert f"half: 1 of 2 GPUs free, 2 needed (GPU 0: root python3 pid {job.pid})" in error
            assert "cpubox: no GPU (no NVIDIA driver: nvidia-smi is not installed on this host)" in error

            try:
                up = laptop.devenv("up", "@gpus", "--env", "one", "--detach", "--json")
                assert up.returncode == 0, up.stderr
                said = placement_lines(up.stderr)
                assert said[0].startswith("Chose half: the only host that fits: 1 of 2 GPUs free (1 needed)")
                assert f"Passed over busy: 0 of 1 GPU free, 1 needed (GPU 0: root python3 pid {job.pid})" in said
                assert "Passed over cpubox: no GPU (no NVIDIA driver: nvidia-smi is not installed on this host)" \
                    in said
                result = json.loads(up.stdout)
                assert result["host"] == "half" and result["status"]["gpus"] == "1"  # the free GPU, not the busy
                assert result["placement"]["host"] == "half" and not result["placement"]["remembered"]
                assert set(result["placement"]["passed_over"]) == {"busy", "cpubox"}

                again = laptop.devenv("up", "@gpus", "--env", "one", "--detach", "--json")
                assert again.returncode == 0, again.stderr
                assert placement_lines(again.stderr) == ["Returning to half, where `up @gpus` made it before"]
                redone = json.loads(again.stdout)
                assert redone["host"] == "half" and redone["action"] == "reattached"
                assert redone["placement"]["remembered"]
            finally:
                laptop.devenv("down", "half", "--env", "one", "--purge", "--yes")
    finally:
        job.kill()
        job.wait()


def test_up_group_prefers_the_host_that_has_the_image(laptop):
    """No GPUs asked for: the test host's docker and podman both fit; only docker has the image."""
    token = secrets.token_hex(3)
    image = f"devenv-pick/pytorch:{token}"
    cpu = (laptop.home / "profiles" / "envs" / "cpu.yaml").read_text()
    source_image = next(line.split(":", 1)[1].strip() for line in cpu.splitlines() if line.startswith("image:"))
    docker("tag", source_image, image, check=True)
    env = f"pick{token}"
    laptop.env(env, cpu.replace(f"image: {source_image}", f"image: {image}")
               .replace("jupyter: 8888", f"jupyter: {free_port()}").replace("ssh: 2222", f"ssh: {free_port()}"))
    for name, engine in (("pick-docker", "docker"), ("pick-podman", "podman")):
        laptop.host(name, f"ssh:\n  alias: testbox\nruntime: docker\nengine: {engine}\npython: python3\n"
                          "groups: [pick]\n")
    laptop.host("pick-gone", f"ssh:\n  hostname: 127.0.0.1\n  port: {free_port()}\n  connect_timeout: 5\n"
                             "groups: [pick]\n")
    try:
        up = laptop.devenv("up", "@pick", "--env", env, "--detach", "--json")
        assert up.returncode == 0, up.stderr
        said = placement_lines(up.stderr)
        assert said[0] == f"Chose pick-docker: the best fit: no GPU, none needed, has {image}"
        assert f"Passed over pick-podman: fits, but lacks {image} (pick-docker has it)" in said
        assert any(line.startswith("Passed over pick-gone: not reachable: ") and "connection refused" in line
                   for line in said)
        result = json.loads(up.stdout)
        assert result["host"] == "pick-docker" and result["action"] == "created"
        assert result["placement"]["image_from"] is None  # the chosen host has it: nothing to offer
    finally:
        laptop.devenv("down", "pick-docker", "--env", env, "--purge", "--yes")
        docker("rmi", image)
