"""`devenv sync` sends a project as git sees it (issue 28, point 3), on the real test host: a negated pattern's
file arrives, nested .gitignore and .git/info/exclude count, .git/ never goes, -v names what stayed here,
--watch reports only what it sent, and --pull of a path that is not there is one error with no empty folder."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from env_testing import REPO, docker

pytestmark = pytest.mark.integration


def _git(root, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t"})


def _there(test_env, path: str) -> bool:
    return docker("exec", test_env.container, "test", "-e", f"/workspace/proj/{path}").returncode == 0


def _until(predicate, seconds: float = 60) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


def test_sync_sends_what_git_sends(test_env, tmp_path):
    env = test_env.name
    project = tmp_path / "proj"
    (project / "sub").mkdir(parents=True)
    (project / ".gitignore").write_text("*.ckpt\n!keep.ckpt\n*.log\n")
    (project / "keep.ckpt").write_text("tracked weights")
    (project / "model.ckpt").write_text("big")
    (project / "sub" / ".gitignore").write_text("scratch/\n")
    (project / "sub" / "scratch").mkdir()
    (project / "sub" / "scratch" / "tmp.bin").write_text("no")
    (project / "train.py").write_text("print(1)\n")
    _git(project, "init", "-q")
    (project / ".git" / "info" / "exclude").write_text("notes.txt\n")
    (project / "notes.txt").write_text("mine")
    _git(project, "add", ".")
    _git(project, "commit", "-qm", "start")
    test_env.run("up", "testbox", "--env", env, "--detach", "--json")

    done = test_env.run("sync", "testbox", str(project), "--env", env, "-v")
    sent = docker("exec", test_env.container, "sh", "-c", "cd /workspace/proj && find . -type f | sort").stdout
    assert sent.split() == ["./.gitignore", "./keep.ckpt", "./sub/.gitignore", "./train.py"], sent
    skipped = done.stderr
    assert "Skipped (git: not sent): .git/, model.ckpt, notes.txt, sub/scratch/" in skipped, skipped

    # --watch: an ignored file's change is neither sent nor reported; a sent file's change is, by name
    watcher = subprocess.Popen([sys.executable, "-m", "devenv", "sync", "testbox", str(project), "--env", env,
                                "--watch", "--interval", "0.3"], env=test_env.environ, cwd=REPO,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert watcher.stdout.readline().startswith("Synced ")
        (project / "run.log").write_text("a log line")
        (project / "train.py").write_text("print(2)\n")
        report = watcher.stdout.readline()
        assert "synced 1 change(s) (train.py)" in report, report
        assert _until(lambda: docker("exec", test_env.container, "cat",
                                     "/workspace/proj/train.py").stdout == "print(2)\n")
        assert not _there(test_env, "run.log")
    finally:
        watcher.terminate()
        watcher.wait(timeout=30)

    # --pull of a path that is not there: one error (exit 2), and no empty folder made here
    missing = test_env.run("sync", "testbox", str(project), "--env", env, "--pull", "outputs/run1", check=False)
    assert missing.returncode == 2, missing.stderr
    assert "/workspace/proj/outputs/run1 does not exist in the environment" in missing.stderr
    assert missing.stderr.count("Error:") == 1 and not (project / "outputs").exists()
