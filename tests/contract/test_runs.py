"""Detached runs, on every backend (tests/contract/conftest.py's `place`): `devenv run` starts a command that
outlives the devenv (and the SSH connection) that started it; its output and exit code stay on the host; `logs
--run -f` follows it; `cancel` ends its whole process tree. Every wait is on an event (a line, a file, the run's
end), never a sleep."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from places import Place


def start_run(place: Place, *command: str, name: str | None = None) -> str:
    named = ["--name", name] if name else []
    done = place.ok("run", place.host, *named, "--no-follow", "--", *command)
    run_id = done.stdout.strip().splitlines()[-1]
    assert run_id and all(c in "0123456789abcdef" for c in run_id), done.stdout
    return run_id


def run_rows(place: Place) -> dict[str, dict]:
    listed = json.loads(place.ok("runs", place.host, "--json").stdout)
    assert listed["schema_version"] == 1
    return {r["id"]: r for r in listed["hosts"][place.host]["runs"]}


def test_run_records_output_and_exit_code(place: Place):
    place.up()
    run_id = start_run(place, "sh", "-c", "echo one; echo two >&2; printf 'no end'; exit 3", name="first")
    followed = place.devenv("logs", place.host, "--run", run_id, "-f")
    assert followed.returncode == 0, followed.stderr
    assert followed.stdout == "one\ntwo\nno end", followed.stdout
    row = run_rows(place)[run_id]
    assert (row["state"], row["exit_code"], row["name"]) == ("exited", 3, "first"), row
    assert row["argv"] == ["sh", "-c", "echo one; echo two >&2; printf 'no end'; exit 3"]
    table = place.ok("runs", place.host).stdout
    assert run_id in table and "exited 3" in table, table


def test_run_wait_exits_with_the_commands_code_and_missing_command_is_127(place: Place):
    place.up()
    waited = place.devenv("run", place.host, "--wait", "--", "sh", "-c", "echo waited; exit 5")
    assert waited.returncode == 5, waited.stderr
    assert "waited" in waited.stdout
    missing = place.devenv("run", place.host, "--wait", "--", "devenv-no-such-command")
    assert missing.returncode == 127, missing.stderr
    assert "devenv-no-such-command" in missing.stdout


def test_run_outlives_the_connection_and_the_log_is_complete(place: Place):
    """The devenv following the run is killed (its SSH connection dies with it); the run goes on, and its log,
    read again from the start, has every line once."""
    place.up()
    place.ok("exec", place.host, "--", "rm", "-f", "runs-go")
    follower = place.start("run", place.host, "--follow", "--", "sh", "-c",
                           "echo started; while [ ! -e runs-go ]; do sleep 0.1; done; echo finished; exit 4")
    found = follower.wait_line(r"^[0-9a-f]{12}$", 180)
    run_id = found.group(0)
    follower.wait_line(r"^started$", 120)
    follower.proc.send_signal(signal.SIGKILL)
    follower.finish()
    assert run_rows(place)[run_id]["state"] == "running"
    place.ok("exec", place.host, "--", "touch", "runs-go")
    again = place.devenv("logs", place.host, "--run", run_id, "-f")
    assert again.stdout == "started\nfinished\n", again.stdout
    row = run_rows(place)[run_id]
    assert (row["state"], row["exit_code"]) == ("exited", 4), row


def test_cancel_ends_the_whole_tree(place: Place):
    place.up()
    run_id = start_run(place, "sh", "-c", "sleep 1000 & echo $! > runs-child.pid; echo up; wait")
    follower = place.start("logs", place.host, "--run", run_id, "-f")
    follower.wait_line(r"^up$", 120)
    child = place.ok("exec", place.host, "--", "cat", "runs-child.pid").stdout.strip()
    assert child.isdigit(), child
    cancelled = place.ok("cancel", place.host, run_id, "--grace", "5")
    assert "Cancelled run" in cancelled.stdout, cancelled.stdout
    assert follower.finish() == 0          # the follower ends by itself once the run ended
    # alive: it answers a signal and is no zombie (one that ended but is not reaped yet by init runs nothing)
    gone = place.devenv("exec", place.host, "--", "sh", "-c", f"kill -0 {child} 2>/dev/null && read -r l < "
                        f"/proc/{child}/stat && l=${{l##*) }} && [ \"${{l%% *}}\" != Z ]")
    assert gone.returncode != 0, f"the run's child {child} outlived the cancel"
    row = run_rows(place)[run_id]
    assert row["state"] == "killed", row
    again = place.ok("cancel", place.host, run_id)
    assert "already ended" in again.stdout


def test_unknown_run_is_bad_input(place: Place):
    place.up()
    for args in (["logs", place.host, "--run", "ffffffff0000"], ["cancel", place.host, "ffffffff0000"]):
        done = place.devenv(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert "no run 'ffffffff0000'" in done.stderr and "devenv runs" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


def test_binary_output_comes_back_byte_for_byte(place: Place):
    place.up()
    run_id = start_run(place, "sh", "-c", r"printf '\000\377\001x'")
    done = subprocess.run([*place.argv0, "logs", place.host, "--run", run_id, "-f"], capture_output=True,
                          env=place.environ, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"\x00\xff\x01x"


@pytest.mark.parametrize("then", ["stop", "down"])
def test_then_stop_or_down_or_refused_with_a_reason(place: Place, then: str):
    """--then stop|down where the backend offers it: the environment is stopped (or taken down) when the run
    ends, and `up` brings it back; where it does not, a clear refusal (exit 2) before anything starts."""
    place.up()
    done = place.devenv("run", place.host, "--wait", "--then", then, "--", "sh", "-c", "echo bye")
    if done.returncode == 2:
        assert "is not offered" in done.stderr, done.stderr
        # only the in-memory engine (a local docker backend, no host to watch from) may refuse: the real
        # backends must do it, or the "--then down leaves nothing" is unproven there
        assert place.kind == "memory", f"--then {then} refused on {place.kind}: {done.stderr}"
        return
    assert done.returncode == 0, done.stderr
    deadline = time.monotonic() + 120   # the supervisor stops it just after the run ended: wait for that state
    while any(r["state"] == "running" for r in place.rows()) or (then == "down" and place.live()):
        assert time.monotonic() < deadline, f"still there after the run ended: {place.rows()} {place.live()}"
    assert place.up()["status"]["state"] == "running"


def test_follow_goes_on_at_the_same_byte_after_its_connection_is_killed(place: Place, request: pytest.FixtureRequest):
    """`logs --run -f` whose SSH connection is killed on the server's side (its sshd SIGKILLed) connects again
    and goes on where it was: every line once, none lost."""
    if place.kind == "memory":
        pytest.skip("the in-memory backend has no connection to kill (it runs here)")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration" / "environments"))
    from sshd_sessions import listener_pid, serving, signal_all

    testhost = request.getfixturevalue("testhost")
    place.up()
    place.ok("exec", place.host, "--", "rm", "-f", "runs-go2")
    run_id = start_run(place, "sh", "-c", "echo first; while [ ! -e runs-go2 ]; do sleep 0.1; done; "
                                          "i=0; while [ $i -lt 300 ]; do echo line $i; i=$((i+1)); done")
    follower = place.start("logs", place.host, "--run", run_id, "-f")
    follower.wait_line(r"^first$", 120)
    pids = serving(listener_pid(testhost), place.login_port or testhost.port, follower.proc.pid)
    assert pids, "no sshd serves the follower's connection"
    signal_all(pids, signal.SIGKILL)
    place.ok("exec", place.host, "--", "touch", "runs-go2")
    assert follower.finish(300) == 0, follower.output
    got = [line for line in follower.lines if line == "first" or line.startswith("line ")]
    assert got == ["first"] + [f"line {i}" for i in range(300)], follower.output
    assert "Traceback" not in follower.output


def test_run_makes_the_environment_first_when_it_is_not_running(place: Place):
    place.up()
    place.ok("down", place.host)
    done = place.devenv("run", place.host, "--wait", "--", "sh", "-c", "echo made")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "made", done.stdout
    assert [r["state"] for r in place.rows()] == ["running"]


def test_a_run_whose_supervisor_is_killed_is_lost_with_its_log_kept(place: Place):
    """The supervisor SIGKILLed with the command's process group (what a host reboot, a container restart or an
    ended job does to them): the run is `lost`, not running forever; its log stays readable, `logs -f` ends
    on it and says the run was lost."""
    place.up()
    run_id = start_run(place, "sh", "-c", "echo before the end; while :; do sleep 0.1; done", name="doomed")
    follower = place.start("logs", place.host, "--run", run_id, "-f")
    follower.wait_line(r"^before the end$", 120)
    killed = place.devenv("exec", place.host, "--", "sh", "-c",
                          f'read -r sup st pg ep < .devenv/runs/{run_id}/pid && kill -9 "$sup" && '
                          'kill -9 "-$pg" && echo "killed $sup $pg"')   # dash's kill takes no `--`
    assert killed.returncode == 0 and killed.stdout.startswith("killed "), (killed.stdout, killed.stderr)
    assert follower.finish(120) == 0, follower.output      # the follower ends, saying the run was lost
    assert "was lost" in follower.output and "its log is kept" in follower.output, follower.output
    row = run_rows(place)[run_id]
    assert (row["state"], row["exit_code"], row["name"]) == ("lost", None, "doomed"), row
    assert run_id in place.ok("runs", place.host).stdout
    log = place.devenv("logs", place.host, "--run", run_id)
    assert (log.returncode, log.stdout) == (0, "before the end\n"), (log.stdout, log.stderr)
    gone = place.devenv("cancel", place.host, run_id)       # nothing to stop: said, no error
    assert gone.returncode == 0, gone.stderr
    assert "Traceback" not in follower.output + gone.stderr
