"""The daily loop on the real test host: code in (sync, watch), outputs back, stdin through exec."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from env_testing import REPO, docker

from devenv.remote.openssh import env_alias

pytestmark = pytest.mark.integration


def _in_container(test_env, *argv: str) -> subprocess.CompletedProcess:
    return docker("exec", test_env.container, *argv)


def _wait_for(predicate, seconds: float = 60) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.3)
    return predicate()


def test_sync_round_trip_gitignore_watch_and_pull(test_env, tmp_path):
    env = test_env.name
    project = tmp_path / "proj"
    (project / "src").mkdir(parents=True)
    (project / ".gitignore").write_text("*.ckpt\n")
    (project / "src" / "train.py").write_text("print('v1')\n")
    (project / "weights.ckpt").write_text("huge")

    # up --sync: the first copy, told on stderr (stdout stays JSON)
    up = test_env.run("up", "testbox", "--env", env, "--detach", "--json", "--sync", str(project))
    assert json.loads(up.stdout)["action"] == "created"
    assert "/workspace/proj" in up.stderr
    assert _in_container(test_env, "cat", "/workspace/proj/src/train.py").stdout == "print('v1')\n"
    gone = _in_container(test_env, "test", "-e", "/workspace/proj/weights.ckpt")
    assert gone.returncode == 1, "a gitignored file was sent"
    tools = _in_container(test_env, "sh", "-c", "for t in git rsync vi; do command -v $t; done")
    assert tools.returncode == 0 and len(tools.stdout.split()) == 3, tools.stdout + tools.stderr

    # a change here appears there, with sync
    (project / "src" / "train.py").write_text("print('v2')\n")
    test_env.run("sync", "testbox", str(project), "--env", env)
    assert _in_container(test_env, "cat", "/workspace/proj/src/train.py").stdout == "print('v2')\n"

    # ... and with --watch, without running anything again
    watcher = subprocess.Popen([sys.executable, "-m", "devenv", "sync", "testbox", str(project), "--env", env,
                                "--watch", "--interval", "0.3"], env=test_env.environ, cwd=REPO,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert _wait_for(lambda: _in_container(test_env, "true").returncode == 0)
        assert watcher.stdout.readline().startswith("Synced ")
        (project / "src" / "new.py").write_text("x = 3\n")
        assert _wait_for(lambda: _in_container(test_env, "cat", "/workspace/proj/src/new.py").stdout == "x = 3\n")
    finally:
        watcher.terminate()
        watcher.wait(timeout=30)

    # a file made there comes back with --pull; deletions only with --delete
    made = _in_container(test_env, "sh", "-c", "mkdir -p /workspace/proj/outputs && echo 0.93 > "
                                               "/workspace/proj/outputs/metrics.txt && touch /workspace/proj/there.txt")
    assert made.returncode == 0, made.stderr
    test_env.run("sync", "testbox", str(project), "--env", env, "--pull", "outputs")
    assert (project / "outputs" / "metrics.txt").read_text() == "0.93\n"
    test_env.run("sync", "testbox", str(project), "--env", env)
    assert _in_container(test_env, "test", "-e", "/workspace/proj/there.txt").returncode == 0
    (project / "outputs").rename(tmp_path / "outputs-elsewhere")
    test_env.run("sync", "testbox", str(project), "--env", env, "--delete")
    assert _in_container(test_env, "test", "-e", "/workspace/proj/there.txt").returncode == 1
    assert _in_container(test_env, "test", "-e", "/workspace/proj/src/new.py").returncode == 0

    # a path outside the workspace is bad input, before anything runs
    bad = test_env.run("sync", "testbox", str(project), "--env", env, "--pull", "../etc", check=False)
    assert bad.returncode == 2 and "not a folder inside the workspace" in bad.stderr


def test_exec_stdin_tty_taken_port_status_labels_and_json(test_env):
    env = test_env.name
    up = json.loads(test_env.run("up", "testbox", "--env", env, "--detach", "--json").stdout)
    assert up["schema_version"] == 1
    jup = up["jupyter"]
    assert jup["host_port"] == up["status"]["ports"]["jupyter"] and jup["token"]
    assert jup["url"] is None and jup["tunnel_command"] == f"devenv jupyter testbox --env {env} --json"

    # stdin reaches the command; the words arrive as given; it runs in the workspace
    cat = test_env.run("exec", "testbox", "--env", env, "--", "cat", stdin="hi\n")
    assert cat.stdout == "hi\n"
    words = test_env.run("exec", "testbox", "--env", env, "--", "sh", "-c", 'printf "%s|" "$@"; pwd', "x",
                         "a b", "$HOME", ";id", stdin="")
    assert words.stdout == "a b|$HOME|;id|/workspace\n"
    code = test_env.run("exec", "testbox", "--env", env, "--", "sh", "-c", "read l; exit $l", stdin="7\n",
                        check=False)
    assert code.returncode == 7
    tty = test_env.run("exec", "testbox", "--env", env, "-t", "--", "sh", "-c", "tty; test -t 0 && echo yes")
    assert "/dev/pts/" in tty.stdout and "yes" in tty.stdout

    # an explicit local port that is taken is refused; without -p a taken preferred port gives a free one
    import socket
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        refused = test_env.run("jupyter", "testbox", "--env", env, "-p", str(port), check=False)
        assert refused.returncode == 6 and "already in use" in refused.stderr
        held = test_env.popen("jupyter", "testbox", "--env", env, "--json")
        try:
            line = json.loads(held.stdout.readline())
        finally:
            held.terminate()
            held.wait(timeout=30)
        assert line["schema_version"] == 1 and line["host_port"] == jup["host_port"]
        assert line["url"] == f"http://127.0.0.1:{line['local_port']}/lab?token={jup['token']}"
        tun = test_env.popen("tunnel", "testbox", "8888", "--env", env, "--json")
        try:
            forwards = json.loads(tun.stdout.readline())["forwards"]
        finally:
            tun.terminate()
            tun.wait(timeout=30)
        assert forwards[0]["env_port"] == 8888 and forwards[0]["local"].startswith("127.0.0.1:")

    # status says the ports are the host's, not this machine's
    status = test_env.run("status", "testbox").stdout
    assert f"host:{jup['host_port']}" in status and "JUPYTER@HOST" in status
    assert f"127.0.0.1:{jup['host_port']}" not in status

    # `code` names the environment's entry and workspace (`code` is not installed here: the command is printed)
    code = test_env.run("code", "testbox", "--env", env, "--path", "proj")
    alias = env_alias("testbox", env)  # the env's "-" doubled (issue 14: aliases name one pair)
    assert code.stdout.strip() == f"code --remote ssh-remote+{alias} /workspace/proj"
    assert "devenv ssh-config install" in code.stderr
    config = test_env.home / "ssh" / "config"
    over_entry = subprocess.run(["ssh", "-F", str(config), "-o", "BatchMode=yes", alias, "hostname"],
                                capture_output=True, text=True, timeout=60)
    assert over_entry.stdout.strip() == f"devenv-{env}", over_entry.stderr


def test_up_with_a_projects_devcontainer_json(test_env, tmp_path):
    env = test_env.name
    project = tmp_path / "withdc"
    (project / ".devcontainer").mkdir(parents=True)
    (project / ".devcontainer" / "devcontainer.json").write_text("""{
      // the test base image stands in for mcr.microsoft.com/devcontainers/python
      "name": "With DC",
      "image": "devenv-base:bookworm",
      "forwardPorts": [6006,],
      "containerEnv": {"DC_MODE": "from-devcontainer"},
      "postCreateCommand": "echo \\"created $DC_MODE\\" > /workspace/post-create.txt",
      "postStartCommand": ["sh", "-c", "date >> /workspace/starts.txt"],
      "features": {"ghcr.io/devcontainers/features/node:1": {}},
    }""")
    up = test_env.run("up", "testbox", "--env", env, "--detach", "--json", "--devcontainer", str(project))
    result = json.loads(up.stdout)
    assert result["action"] == "created", up.stderr
    assert result["devcontainer"]["image"].startswith("devenv-dc/with-dc:")
    assert result["devcontainer"]["tunnel_commands"] == ["forwardPorts 6006: devenv tunnel testbox 6006"]
    assert "not honoured: features: not supported by devenv" in up.stderr
    # devenv's own needs on top of the devcontainer's image: Jupyter and sshd answer, as for any environment
    assert set(result["status"]["ports"]) == {"jupyter", "ssh"}
    made = _in_container(test_env, "cat", "/workspace/post-create.txt")
    assert made.stdout == "created from-devcontainer\n", made.stderr
    assert len(_in_container(test_env, "cat", "/workspace/starts.txt").stdout.splitlines()) == 1
    image = docker("inspect", "-f", "{{.Image}}", test_env.container).stdout.strip()
    assert image == docker("image", "inspect", "-f", "{{.Id}}", result["devcontainer"]["image"]).stdout.strip()

    # again: reattached, so postCreateCommand does not run twice
    again = json.loads(test_env.run("up", "testbox", "--env", env, "--detach", "--json", "--devcontainer",
                                    str(project)).stdout)
    assert again["action"] == "reattached"
    assert len(_in_container(test_env, "cat", "/workspace/starts.txt").stdout.splitlines()) == 1

    # the forwarded port reaches a server started in the environment
    _in_container(test_env, "sh", "-c", "cd /tmp && echo served > index.html && "
                  "(python3 -m http.server 6006 --bind 0.0.0.0 >/dev/null 2>&1 &)")
    tun = test_env.popen("tunnel", "testbox", "6006", "--env", env, "--json")
    try:
        local = json.loads(tun.stdout.readline())["forwards"][0]["local_port"]
        import urllib.request
        assert _wait_for(lambda: _get(urllib.request, local) == "served\n")
    finally:
        tun.terminate()
        tun.wait(timeout=30)


def _get(request, port: int) -> str:
    try:
        return request.urlopen(f"http://127.0.0.1:{port}/index.html", timeout=5).read().decode()
    except OSError:
        return ""
