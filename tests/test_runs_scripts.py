"""devenv.env.runs' scripts, run by this machine's sh in a folder of the test's (the same scripts every backend
runs, tests/contract/test_runs.py runs them there): states, reads by offset, lost runs, and the listing's model."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import pytest

from devenv.env import runs as model
from devenv.errors import BadInput


def sh(script: str, *args: str) -> str:
    done = subprocess.run(["sh", "-c", script, "devenv", *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def launch(runs: Path, *argv: str, wait_end: bool = True) -> str:
    run_id = model.new_run_id()
    meta = model.meta_line(run_id, None, list(argv), "e", None, None)
    said = sh(model.LAUNCH, str(runs), run_id, meta, model.SUPERVISOR, "0", "0", "0", "--", *argv).strip()
    assert said == run_id
    if wait_end:   # READ waits on the host side for the end (bounded): the run's own event, no sleep here
        for _ in range(100):
            if read(runs, run_id, 0, 1 << 20, wait=40)[0] not in ("running", "starting"):
                break
    return run_id


def read(runs: Path, run_id: str, offset: int, limit: int, wait: int = 0) -> tuple[str, int, bytes]:
    return read_all(runs, run_id, offset, limit, wait)[:3]   # type: ignore[return-value]


def read_all(runs: Path, run_id: str, offset: int, limit: int, wait: int = 0) -> tuple[str, int, bytes, str]:
    out = sh(model.READ, str(runs), run_id, str(offset), str(limit), str(wait))
    head, _, body = out.partition("\n")
    state, size, code = head.split()
    return state, int(size), base64.b64decode("".join(body.split())), code


def test_pieces_by_offset_give_the_log_once(tmp_path: Path):
    runs = tmp_path / "runs"
    run_id = launch(runs, "sh", "-c", "i=0; while [ $i -lt 3000 ]; do echo line $i; i=$((i+1)); done; printf end")
    whole = (runs / run_id / "log").read_bytes()
    got, offset = b"", 0
    while True:
        state, size, data = read(runs, run_id, offset, 4096)
        assert len(data) <= 4096          # a piece, never the whole log
        got += data
        offset += len(data)
        if offset >= size:
            break
    assert got == whole and got.endswith(b"line 2999\nend")
    assert state == "exited"
    failed = launch(runs, "sh", "-c", "exit 9")
    assert read_all(runs, failed, 0, 10)[::3] == ("exited", "9")   # the code comes with the log's end


def test_listing_states_and_exit_codes(tmp_path: Path):
    runs = tmp_path / "runs"
    ok = launch(runs, "true")
    failed = launch(runs, "sh", "-c", "exit 9")
    missing = launch(runs, "devenv-no-such-command")
    lost = launch(runs, "true")
    (runs / lost / "exit").unlink()   # as after a reboot: a supervisor that never wrote its end, its pid gone
    (runs / lost / "pid").write_text("999999999 1 999999999 0\n")
    listed = {r.id: r for r in model.parse_listing(sh(model.LIST, str(runs)))}
    assert listed[ok].state == "exited 0"
    assert listed[failed].state == "exited 9"
    assert listed[missing].state == "exited 127"
    assert listed[lost].state == "lost" and listed[lost].duration(0) is None
    assert sh(model.PRUNE, str(runs)).strip() == "3"
    assert [r.id for r in model.parse_listing(sh(model.LIST, str(runs)))] == [lost]


def test_cancel_reaches_the_process_group(tmp_path: Path):
    runs = tmp_path / "runs"
    run_id = launch(runs, "sh", "-c", "trap '' TERM; sleep 600 & echo started; wait", wait_end=False)
    state, _, data = read(runs, run_id, 0, 100, wait=400)   # until the first line is there
    assert data == b"started\n", (state, data)
    before, *after = sh(model.CANCEL, str(runs), run_id, "1").split()
    assert before == "running" and after == ["killed"]   # TERM was ignored: KILL after the grace
    listed = model.parse_listing(sh(model.LIST, str(runs)))
    assert listed[0].phase == "killed" and listed[0].exit_code == 137
    assert read_all(runs, run_id, 0, 100)[::3] == ("killed", "137")


# The run's process (the group's leader) forks a keeper, which forks a member of the group and moves itself to a
# group of its own: after the TERM the member is a zombie whose parent (the keeper, outside the group) never reaps it.
UNREAPED = """
import os, sys, time
if os.fork() == 0:
    member = os.fork()
    if member == 0:
        time.sleep(600)
        os._exit(0)
    os.setpgid(0, 0)
    print(os.getpid(), member, flush=True)
    time.sleep(600)
    os._exit(0)
os.wait()
"""


def test_cancel_does_not_wait_for_a_member_that_ended_but_is_not_reaped(tmp_path: Path):
    """Every process of the run ends at the TERM, one stays a zombie (its parent has not reaped it; on a host an
    orphan waits for init, which some inits do seconds later). Before, `kill -0` on the group answered for the
    zombie: cancel waited the whole grace and reported a KILL (this test failed: after == ["killed"])."""
    import os
    import signal
    import sys

    runs = tmp_path / "runs"
    run_id = launch(runs, sys.executable, "-c", UNREAPED, wait_end=False)
    state, _, data = read(runs, run_id, 0, 100, wait=400)   # until the keeper said who it is
    keeper, member = (int(w) for w in data.split())
    try:
        before, *after = sh(model.CANCEL, str(runs), run_id, "3").split()
        assert before == "running" and after == []   # the TERM ended it all: no KILL
        assert _state_of(member) == "Z"              # the case: its zombie was there all along
        assert read_all(runs, run_id, 0, 100)[::3] == ("killed", "143")
    finally:
        os.kill(keeper, signal.SIGKILL)


def _state_of(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def test_an_empty_or_missing_runs_folder_lists_nothing(tmp_path: Path):
    assert sh(model.LIST, str(tmp_path / "none")) == ""
    (tmp_path / "empty").mkdir()
    assert sh(model.LIST, str(tmp_path / "empty")) == ""


def test_find_by_id_prefix_and_name():
    runs = [model.Run(id="6b11b27c751a", name="a"), model.Run(id="6b11b27c15f0", name="a"),
            model.Run(id="6b11b27cf3fb")]
    assert model.find_run(runs, "a").id == "6b11b27c15f0"   # the newest (last listed) of that name
    assert model.find_run(runs, "6b11b27cf").id == "6b11b27cf3fb"
    assert model.find_run(runs, "6b11b27c") is None        # ambiguous
    with pytest.raises(BadInput):
        model.check_run_id("../etc")
    with pytest.raises(BadInput):
        model.check_run_name("-rf")


def test_a_line_being_written_is_left_out():
    listing = "\n".join(["6b11b27c751a/meta.json:" + json.dumps({"argv": ["x"]}), "6b11b27c15f0/meta.json:{\"ar",
                         "6b11b27c751a/exit:0 12", "junk"])
    assert [(r.id, r.state) for r in model.parse_listing(listing)] == [("6b11b27c751a", "exited 0")]


@pytest.mark.parametrize("args, said", [
    (["run", "nohost.invalid", "--name", "../x", "--", "true"], "run name '../x' is not allowed"),
    (["run", "nohost.invalid", "--then", "sideways", "--", "true"], "'sideways' is not one of"),
    (["run", "nohost.invalid"], "Missing argument"),
])
def test_bad_run_input_is_exit_2_before_connecting(args: list[str], said: str, tmp_path: Path):
    import os
    import sys

    done = subprocess.run([sys.executable, "-m", "devenv", *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "DEVENV_HOME": str(tmp_path)}, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr
    assert said in done.stderr and "Traceback" not in done.stderr, done.stderr
