"""remote.ssh_pipe with `bash -c` standing in for `ssh HOST` (the same argv shape: the script is its last word):
the pgid tag, the splice between two pipes, and an abort that kills the load before it sees the end of its input.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from devenv.remote.ssh_pipe import NoStart, OpenSSHPipe, splice_step

LOCAL = ["bash", "-c"]


def _stop(script: str) -> None:
    subprocess.run(["bash", "-c", script], check=False, timeout=30)


def test_the_stream_is_spliced_whole_and_counted():
    saver = OpenSSHPipe(LOCAL, "head -c 5000000 /dev/zero", _stop, writes=False)
    loader = OpenSSHPipe(LOCAL, "wc -c", _stop, writes=True)
    saver.started(10)
    loader.started(10)
    assert saver.pgid and loader.pgid and saver.pgid != loader.pgid
    moved = 0
    while (n := splice_step(saver.stdout_fd, loader.stdin_fd)) != 0:
        moved += max(n, 0)
    assert moved == 5_000_000
    assert saver.finish(10).ok
    loaded = loader.finish(10)
    assert loaded.ok and loaded.stdout.strip() == "5000000"


def test_an_abort_kills_the_load_before_it_sees_the_end(tmp_path: Path):
    """Only this process holds the load's stdin: the bytes it got never end cleanly, so it never finishes."""
    flag = tmp_path / "loaded"
    loader = OpenSSHPipe(LOCAL, f"cat >/dev/null && touch {flag}", _stop, writes=True)
    loader.started(10)
    saver = OpenSSHPipe(LOCAL, "head -c 100000 /dev/zero; exit 1", _stop, writes=False)
    saver.started(10)
    while splice_step(saver.stdout_fd, loader.stdin_fd) != 0:
        pass
    assert not saver.finish(10).ok   # a save that failed after its bytes: the stream is not whole
    loader.abort()
    assert not flag.exists()
    assert loader.finish(10).exit_code != 0


def test_a_command_that_never_starts_is_said():
    pipe = OpenSSHPipe(["false"], "true", _stop, writes=False)
    with pytest.raises(NoStart, match="could not start"):
        pipe.started(10)


def test_a_gated_command_runs_only_after_go_and_gets_the_stream_whole(tmp_path: Path):
    ran = tmp_path / "ran"
    idle = OpenSSHPipe(LOCAL, f"touch {ran}", _stop, writes=False, gated=True)
    idle.started(10)
    idle.dismiss()
    assert not ran.exists()   # dismissed before go: it never ran
    saver = OpenSSHPipe(LOCAL, "head -c 3000000 /dev/urandom | tee " + str(tmp_path / "sent"), _stop,
                        writes=False, gated=True)
    loader = OpenSSHPipe(LOCAL, f"cat > {tmp_path / 'got'}", _stop, writes=True, gated=True)
    saver.started(10)
    loader.started(10)
    saver.go(then_close=True)
    loader.go(then_close=False)
    while splice_step(saver.stdout_fd, loader.stdin_fd) != 0:
        pass
    assert saver.finish(10).ok and loader.finish(10).ok
    assert (tmp_path / "got").read_bytes() == (tmp_path / "sent").read_bytes()   # the go line is not in it
