"""image push's decisions (L0) and its byte pipe on this machine (remote.pipe.LocalPipe, real processes)."""

from __future__ import annotations

import shlex

from devenv.env import engines
from devenv.env.image_push import FAILED, PUSHED, SKIPPED, HostImage, PushResult, needs_push, parse_inspect
from devenv.remote.local import LocalConnection


def test_same_id_across_engines_is_skipped():
    docker = parse_inspect("a", "sha256:403249b47c93e79d 1440000000\n")
    podman = parse_inspect("b", "403249b47c93e79d 1440000000")
    assert docker.image_id == podman.image_id == "403249b47c93e79d" and docker.size_bytes == 1440000000
    assert not needs_push(docker, podman)
    assert needs_push(docker, HostImage("c", None))
    assert needs_push(docker, HostImage("c", "sha256:0000"))
    assert needs_push(HostImage("a", None), HostImage("b", None))  # nothing known is never "the same"


def test_results_say_what_happened():
    pushed = PushResult("gpu2", PUSHED, image_id="403249b47c93e79d", bytes_moved=2_000_000_000, seconds=20.0)
    assert pushed.describe() == "gpu2: pushed 2.0 GB in 20.0 s (100.0 MB/s), image 403249b47c93 verified"
    assert pushed.to_dict()["rate_bytes_s"] == 100_000_000
    assert "skipped" in PushResult("gpu3", SKIPPED, image_id="403249b47c93").describe()
    failed = PushResult("gpu4", FAILED, bytes_moved=1_500_000, error="the stream broke", exit_code=1)
    assert failed.describe() == "gpu4: failed after 1.5 MB: the stream broke" and failed.rate_bytes_s is None


def test_engine_commands_quote_the_image_and_pick_the_cli():
    assert engines.save_command("podman", "a/b:c") == "exec podman save a/b:c"
    assert "'x;rm -rf /'" in engines.image_id_command("docker", "x;rm -rf /")
    assert engines.engine_cli("auto").startswith('"$(command -v docker')
    assert engines.is_no_such_image("Error: No such image: foo") and engines.is_no_such_image(
        "Error: foo: image not known")
    assert not engines.is_no_such_image("permission denied while trying to connect to the Docker daemon")


def test_load_runs_in_a_private_tmpdir_removed_when_killed(tmp_path):
    """The load command's wrapper, with `cat` standing in for the engine: its TMPDIR is gone after an abort."""
    conn = LocalConnection()
    command = engines.load_command("docker").replace("docker load -q", "sh -c 'echo $TMPDIR; exec cat >/dev/null'")
    pipe = conn.open_pipe(f"export TMPDIR={shlex.quote(str(tmp_path))}\n{command}")
    pipe.write(b"x" * 100_000)
    made = pipe.read(4096).decode().strip()
    assert made.startswith(str(tmp_path / engines.LOAD_TMP_PREFIX)) and (tmp_path / made.rsplit("/", 1)[1]).is_dir()
    pipe.abort()
    assert list(tmp_path.iterdir()) == []


def test_load_tmpdir_is_removed_when_the_engine_ignores_term(tmp_path):
    """docker's CLI ignores TERM: the wrapper's trap must still run at once, not after the KILL (it left the dir)."""
    conn = LocalConnection()
    stand_in = "sh -c 'trap \"\" TERM; echo $TMPDIR; exec cat >/dev/null'"
    pipe = conn.open_pipe(f"export TMPDIR={shlex.quote(str(tmp_path))}\n"
                          + engines.load_command("docker").replace("docker load -q", stand_in))
    pipe.write(b"x" * 100_000)
    assert pipe.read(4096).decode().strip().startswith(str(tmp_path / engines.LOAD_TMP_PREFIX))
    pipe.abort()
    assert list(tmp_path.iterdir()) == []


def test_pipe_streams_both_ways_and_reports_the_exit():
    pipe = LocalConnection().open_pipe("tr a-z A-Z; exit 3")
    pipe.write(b"hello ")
    pipe.write(b"world")
    result = pipe.finish(10)
    assert result.exit_code == 3
    reader = LocalConnection().open_pipe("head -c 300000 /dev/zero")
    got = 0
    while chunk := reader.read(65536):
        got += len(chunk)
    assert got == 300000 and reader.finish(10).ok
