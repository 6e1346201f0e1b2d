"""rsync argv and change detection for `devenv sync`; a real local rsync for what .gitignore keeps here."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from devenv.errors import BadInputError, DevenvError
from devenv.remote import gitignore, rsync
from devenv.remote.rsync import Target

REMOTE = Target(("ssh", "-F", "/tmp/dir with space/config"), "devenv-box-cuda", "/workspace")


def test_push_sends_contents_into_the_named_folder_through_the_entry(tmp_path):
    argv = rsync.push_argv(tmp_path, REMOTE, "proj", delete=False)
    assert argv[-3:] == ["--", f"{tmp_path.resolve()}/", "devenv-box-cuda:/workspace/proj/"]
    assert argv[argv.index("-e") + 1] == "ssh -F '/tmp/dir with space/config'"
    assert "--delete" not in argv and not any(a.startswith("--filter") for a in argv)


def test_deletions_are_opt_in():
    assert "--delete" in rsync.push_argv(Path("/p"), REMOTE, "p", delete=True)


def test_pull_brings_a_subfolder_back_without_the_gitignore_filter(tmp_path):
    argv = rsync.pull_argv(REMOTE, "proj/outputs", tmp_path)
    assert argv[-2:] == ["devenv-box-cuda:/workspace/proj/outputs/", f"{tmp_path.resolve()}/"]
    assert not any(a.startswith("--filter") for a in argv)


@pytest.mark.parametrize("bad", ["", "../up", "/etc", "-e sh", "a/../../b", "x:y", "a\nb"])
def test_a_subdir_outside_the_workspace_or_like_an_option_is_refused(bad):
    with pytest.raises(BadInputError):
        rsync.check_subdir(bad, "--to")


def test_tree_state_sees_an_edit_a_new_file_and_a_removal_but_not_git_churn_or_ignored_files(tmp_path):
    (tmp_path / "a.py").write_text("1")
    (tmp_path / ".gitignore").write_text("*.log\n")
    (tmp_path / ".git").mkdir()

    def state():
        return rsync.tree_state(tmp_path, gitignore.select(tmp_path))

    before = state()
    (tmp_path / ".git" / "index").write_text("x")
    (tmp_path / "train.log").write_text("a line")  # ignored: not sent, so no change to report
    assert state() == before
    st = (tmp_path / "a.py").stat()
    os.utime(tmp_path / "a.py", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    edited = state()
    assert edited != before
    (tmp_path / "b.py").write_text("2")
    assert set(state()) == {".gitignore", "a.py", "b.py"}


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t"})


def _project(root: Path) -> Path:
    """A project with each of git's ignore rules: negation, a nested .gitignore, a force-added ignored file."""
    (root / "sub" / "deep").mkdir(parents=True)
    (root / ".gitignore").write_text("*.ckpt\n!keep.ckpt\ndata/\n")
    (root / "keep.ckpt").write_text("tracked weights")
    (root / "model.ckpt").write_text("big")
    (root / "data").mkdir()
    (root / "data" / "x.bin").write_text("big")
    (root / "sub" / ".gitignore").write_text("local.txt\n!/deep/again.ckpt\n")
    (root / "sub" / "local.txt").write_text("no")
    (root / "sub" / "deep" / "again.ckpt").write_text("re-included below")
    (root / "sub" / "deep" / "other.ckpt").write_text("no")
    (root / "train.py").write_text("print(1)\n")
    (root / "odd [name]*.txt").write_text("a name rsync must not read as a pattern")
    return root


EXPECTED_SENT = {".gitignore", "keep.ckpt", "odd [name]*.txt", "sub/.gitignore", "sub/deep/again.ckpt", "train.py"}


@pytest.mark.skipif(shutil.which("git") is None, reason="git is installed by testhost/setup")
def test_a_repository_is_read_by_git_itself_with_every_rule(tmp_path, monkeypatch):
    root = _project(tmp_path / "proj")
    _git(root, "init", "-q")
    (root / ".git" / "info" / "exclude").write_text("secret.env\n")
    (root / "secret.env").write_text("TOKEN=1")
    home = tmp_path / "home"
    (home / ".config" / "git").mkdir(parents=True)
    (home / ".config" / "git" / "ignore").write_text(".DS_Store\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    (root / ".DS_Store").write_text("finder")
    (root / "forced.ckpt").write_text("tracked although ignored")
    _git(root, "add", ".")
    _git(root, "add", "-f", "forced.ckpt")
    selection = gitignore.select(root)
    assert selection.by == "git"
    assert set(selection.sent) == EXPECTED_SENT | {"forced.ckpt"}
    assert ".git/" in selection.skipped and "secret.env" in selection.skipped and ".DS_Store" in selection.skipped
    assert "data/" in selection.skipped and "model.ckpt" in selection.skipped


@pytest.mark.skipif(shutil.which("git") is None, reason="git is installed by testhost/setup")
def test_a_folder_that_is_no_repository_gets_gits_rules_too(tmp_path):
    root = _project(tmp_path / "proj")
    selection = gitignore.select(root)
    assert selection.by == "git (no repository)"
    assert set(selection.sent) == EXPECTED_SENT
    assert set(selection.skipped) == {"data/", "model.ckpt", "sub/local.txt", "sub/deep/other.ckpt"}


def test_without_git_the_gitignore_files_are_read_with_gitwildmatch(tmp_path, monkeypatch):
    root = _project(tmp_path / "proj")
    monkeypatch.setattr(gitignore.shutil, "which", lambda name: None)
    selection = gitignore.select(root)
    assert selection.by == ".gitignore files"
    assert set(selection.sent) == EXPECTED_SENT
    assert set(selection.skipped) == {"data/", "model.ckpt", "sub/local.txt", "sub/deep/other.ckpt"}


@pytest.mark.skipif(shutil.which("rsync") is None or shutil.which("git") is None,
                    reason="rsync and git are installed by testhost/setup")
def test_real_rsync_sends_what_git_sends_and_deletes_only_when_asked(tmp_path):
    src, dst = _project(tmp_path / "src"), tmp_path / "ws"
    _git(src, "init", "-q")
    _git(src, "add", ".")
    dst.mkdir()
    local = Target((), None, str(dst))
    rsync.push(src, local, "proj", delete=False)
    sent = {str(p.relative_to(dst / "proj")) for p in dst.rglob("*") if p.is_file()}
    assert sent == EXPECTED_SENT, "negation, nested rules and .git/ as git reads them"
    (dst / "proj" / "made-there.txt").write_text("x")
    (dst / "proj" / "out.ckpt").write_text("result")  # gitignored there: protected from --delete
    rsync.push(src, local, "proj", delete=False)
    assert (dst / "proj" / "made-there.txt").exists()
    rsync.push(src, local, "proj", delete=True)
    assert not (dst / "proj" / "made-there.txt").exists() and (dst / "proj" / "out.ckpt").exists()
    rsync.run(rsync.pull_argv(local, "proj", tmp_path / "back"))
    assert (tmp_path / "back" / "out.ckpt").read_text() == "result"


@pytest.mark.skipif(shutil.which("rsync") is None, reason="rsync is installed by testhost/setup")
def test_pulling_a_path_that_is_not_there_is_one_error_and_leaves_no_folder(tmp_path):
    (tmp_path / "ws" / "proj").mkdir(parents=True)
    project = tmp_path / "here"
    project.mkdir()
    with pytest.raises(BadInputError) as info:
        rsync.pull(Target((), None, str(tmp_path / "ws")), "proj/outputs/run1", project / "outputs" / "run1")
    assert "proj/outputs/run1 does not exist in the environment" in info.value.message
    assert list(project.iterdir()) == []


def test_an_rsync_failure_is_one_message_with_rsyncs_words(tmp_path):
    with pytest.raises(DevenvError) as info:
        rsync.run(["rsync", "-r", "--", str(tmp_path / "missing") + "/", str(tmp_path / "x")])
    assert "rsync failed" in str(info.value) and "missing" in str(info.value)
