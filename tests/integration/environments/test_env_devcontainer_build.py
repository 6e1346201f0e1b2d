"""A repository with its own .devcontainer (a Dockerfile build, forwardPorts, postCreateCommand, a bind mount
and a non-root remoteUser) brought up on the real test host, checked from outside, then taken down."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request

import pytest
from env_testing import docker

pytestmark = pytest.mark.integration

DOCKERFILE = """FROM devenv-base:bookworm
ARG GREETING=unset
RUN useradd --create-home --uid 1234 dev && echo "$GREETING" > /opt/greeting
COPY . /opt/ctx
"""


def _project(tmp_path, data_dir, port: int):
    project = tmp_path / "repo"
    (project / ".devcontainer").mkdir(parents=True)
    (project / ".devcontainer" / "Dockerfile").write_text(DOCKERFILE)
    (project / "train.py").write_text("print('train')\n")
    (project / "secret.env").write_text("TOKEN=never-sent\n")
    # .devcontainer (with this run's paths and ports) stays out of the context: the image is reused next run
    (project / ".dockerignore").write_text("secret.env\n.devcontainer\n")
    (project / ".devcontainer" / "devcontainer.json").write_text(json.dumps({
        "name": "DC Build",
        "build": {"dockerfile": "Dockerfile", "context": "..", "args": {"GREETING": "hello-from-args"}},
        "forwardPorts": [port],
        "onCreateCommand": "echo on-create > /workspace/order.txt",
        "postCreateCommand": "echo \"$(whoami) $(cat /opt/greeting)\" > /workspace/post-create.txt && "
                             "echo post-create >> /workspace/order.txt",
        "postStartCommand": f"nohup python3 -m http.server {port} --bind 0.0.0.0 >/dev/null 2>&1 &",
        "mounts": [f"type=bind,source={data_dir},target=/data,readonly",
                   "source=dc-cache,target=/home/dev/.cache,type=volume"],
        "remoteUser": "dev",
    }, indent=2))
    return project


def test_devcontainer_dockerfile_build_mount_user_ports_then_down(test_env, tmp_path):
    env = test_env.name
    data = tmp_path / "host-data"
    data.mkdir()
    (data / "hello.txt").write_text("from the host\n")
    from sshd_fixture import free_port
    port = free_port()
    project = _project(tmp_path, data, port)

    # up, held (as a user runs it): the project's image is built, devenv's layer on top, the tunnels opened
    up = test_env.popen("up", "testbox", "--env", env, "--devcontainer", str(project), "--yes")
    forwarded = None
    lines = []
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            line = up.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.strip().startswith("forwardPorts: 127.0.0.1:"):
                forwarded = int(line.split("127.0.0.1:")[1].split()[0])
                break
        assert forwarded, "".join(lines) + (up.stderr.read() if up.poll() is not None else "")
        # the forwarded port answers (the server postStartCommand started, as dev)
        body = ""
        for _ in range(50):
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{forwarded}/", timeout=5).read().decode()
                break
            except OSError:
                time.sleep(0.3)
        assert "Directory listing" in body
    finally:
        up.terminate()
        out, err = up.communicate(timeout=60)
    err = "".join(err)
    assert "build context: " in err and f"inside the project folder {project}" in err, err
    assert "user: dev" in err and f"mount: host path {data} at /data (read-only)" in err, err

    # the container: made from the project's image, commands run as dev, the postCreate marker is there
    whoami = test_env.run("exec", "testbox", "--env", env, "--", "whoami")
    assert whoami.stdout.strip() == "dev"
    marker = test_env.run("exec", "testbox", "--env", env, "--", "cat", "/workspace/post-create.txt")
    assert marker.stdout == "dev hello-from-args\n"
    order = test_env.run("exec", "testbox", "--env", env, "--", "cat", "/workspace/order.txt")
    assert order.stdout == "on-create\npost-create\n"
    listed = test_env.run("exec", "testbox", "--env", env, "--", "ls", "/opt/ctx")
    assert "train.py" in listed.stdout.split() and "secret.env" not in listed.stdout, listed.stdout
    # stdin goes through the environment's sshd, which admits dev (the ssh entry says User dev)
    over_ssh = test_env.run("exec", "testbox", "--env", env, "--", "sh", "-c", "whoami; cat", stdin="hi\n")
    assert over_ssh.stdout == "dev\nhi\n"
    config = test_env.home / "ssh" / "config"
    alias = f"devenv-testbox-{env}"
    assert "  User dev\n" in config.read_text()
    as_root = subprocess.run(["ssh", "-F", str(config), "-o", "BatchMode=yes", "-l", "root", alias, "true"],
                             capture_output=True, text=True, timeout=60)
    assert as_root.returncode == 255, "sshd let root in"
    # Jupyter is dev's; the venv is dev's (pip install works without root)
    procs = docker("exec", test_env.container, "ps", "-eo", "user:12,args").stdout
    assert any(line.startswith("dev ") and "jupyter" in line for line in procs.splitlines()), procs
    owner = test_env.run("exec", "testbox", "--env", env, "--", "stat", "-c", "%U", "/opt/venv/bin", "/workspace")
    assert owner.stdout.split() == ["dev", "dev"]
    cache = test_env.run("exec", "testbox", "--env", env, "--", "sh", "-c", "touch ~/.cache/ok && echo $HOME")
    assert cache.stdout.strip() == "/home/dev"
    # the bind mount: the host's folder, read-only
    assert test_env.run("exec", "testbox", "--env", env, "--", "cat", "/data/hello.txt").stdout == "from the host\n"
    wrote = test_env.run("exec", "testbox", "--env", env, "--", "touch", "/data/x", check=False)
    assert wrote.returncode != 0 and not (data / "x").exists()
    # sync lands as dev
    test_env.run("sync", "testbox", str(project), "--env", env)
    synced = test_env.run("exec", "testbox", "--env", env, "--", "stat", "-c", "%U", "/workspace/repo/train.py")
    assert synced.stdout.strip() == "dev"

    # again: reattached (same content, same image); postCreateCommand does not run twice
    again = json.loads(test_env.run("up", "testbox", "--env", env, "--json", "--devcontainer", str(project)).stdout)
    assert again["action"] == "reattached" and again["devcontainer"]["user"] == "dev"
    assert again["devcontainer"]["base_image"].startswith("devenv-dc-base/dc-build:")

    down = test_env.run("down", "testbox", "--env", env)
    assert down.returncode == 0 and test_env.containers() == []


def test_a_bind_mount_whose_host_path_links_to_etc_is_refused_before_anything_is_made(test_env, tmp_path):
    """The text /tmp/.../innocent passes; the host resolves it to /etc, and that is refused."""
    import os

    link = tmp_path / "innocent"
    os.symlink("/etc", link)
    project = tmp_path / "linked"
    (project / ".devcontainer").mkdir(parents=True)
    (project / ".devcontainer" / "devcontainer.json").write_text(json.dumps(
        {"image": "devenv-base:bookworm", "mounts": [f"type=bind,source={link},target=/data"]}))
    up = test_env.run("up", "testbox", "--env", test_env.name, "--detach", "--devcontainer", str(project),
                      check=False)
    assert up.returncode == 1, up.stdout + up.stderr
    assert "refused: on testbox it is /etc" in up.stderr
    missing = tmp_path / "nothing-here"
    (project / ".devcontainer" / "devcontainer.json").write_text(json.dumps(
        {"image": "devenv-base:bookworm", "mounts": [f"type=bind,source={missing},target=/data"]}))
    up = test_env.run("up", "testbox", "--env", test_env.name, "--detach", "--devcontainer", str(project),
                      check=False)
    assert up.returncode == 1 and "does not exist on testbox" in up.stderr
    assert test_env.containers() == [] and test_env.volumes() == []
