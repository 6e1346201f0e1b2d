"""rsync argv and change detection for `devenv sync`; a real local rsync for what .gitignore keeps here."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from devenv.errors import BadInputError, DevenvError
from devenv.remote import rsync
from devenv.remote.rsync import Target

REMOTE = Target(("ssh", "-F", "/tmp/dir with space/config"), "devenv-box-cuda", "/workspace")


def test_push_sends_contents_into_the_named_folder_through_the_entry(tmp_path):
    argv = rsync.push_argv(tmp_path, REMOTE, "proj", delete=False)
    assert argv[-3:] == ["--", f"{tmp_path.resolve()}/", "devenv-box-cuda:/workspace/proj/"]
    assert argv[argv.index("-e") + 1] == "ssh -F '/tmp/dir with space/config'"
    assert "--filter=:- .gitignore" in argv and "--delete" not in argv


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


def test_tree_state_sees_an_edit_a_new_file_and_a_removal_but_not_git_churn(tmp_path):
    (tmp_path / "a.py").write_text("1")
    (tmp_path / ".git").mkdir()
    before = rsync.tree_state(tmp_path)
    (tmp_path / ".git" / "index").write_text("x")
    assert rsync.tree_state(tmp_path) == before
    st = (tmp_path / "a.py").stat()
    os.utime(tmp_path / "a.py", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    edited = rsync.tree_state(tmp_path)
    assert edited != before
    (tmp_path / "b.py").write_text("2")
    assert set(rsync.tree_state(tmp_path)) == {"a.py", "b.py"}


@pytest.mark.skipif(shutil.which("rsync") is None, reason="rsync is installed by testhost/setup")
def test_real_rsync_keeps_gitignored_files_here_and_deletes_only_when_asked(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "ws"
    (src / "sub").mkdir(parents=True)
    dst.mkdir()
    (src / ".gitignore").write_text("*.ckpt\ndata/\n")
    (src / "train.py").write_text("print(1)\n")
    (src / "model.ckpt").write_text("big")
    (src / "data").mkdir()
    (src / "data" / "x.bin").write_text("big")
    (src / "sub" / ".gitignore").write_text("local.txt\n")
    (src / "sub" / "local.txt").write_text("no")
    (src / "sub" / "keep.txt").write_text("yes")
    local = Target((), None, str(dst))
    rsync.run(rsync.push_argv(src, local, "proj", delete=False))
    sent = sorted(str(p.relative_to(dst)) for p in dst.rglob("*") if p.is_file())
    assert sent == ["proj/.gitignore", "proj/sub/.gitignore", "proj/sub/keep.txt", "proj/train.py"]
    (dst / "proj" / "made-there.txt").write_text("x")
    (dst / "proj" / "out.ckpt").write_text("result")  # gitignored there: protected from --delete
    rsync.run(rsync.push_argv(src, local, "proj", delete=False))
    assert (dst / "proj" / "made-there.txt").exists()
    rsync.run(rsync.push_argv(src, local, "proj", delete=True))
    assert not (dst / "proj" / "made-there.txt").exists() and (dst / "proj" / "out.ckpt").exists()
    rsync.run(rsync.pull_argv(local, "proj", tmp_path / "back"))
    assert (tmp_path / "back" / "out.ckpt").read_text() == "result"


def test_an_rsync_failure_is_one_message_with_rsyncs_words(tmp_path):
    with pytest.raises(DevenvError) as info:
        rsync.run(["rsync", "-r", "--", str(tmp_path / "missing") + "/", str(tmp_path / "x")])
    assert "rsync failed" in str(info.value) and "missing" in str(info.value)
