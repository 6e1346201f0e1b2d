"""The daily loop on the real test host: code in (sync, watch), outputs back, stdin through exec."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from conftest import REPO, docker

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
