"""The backend contract, tested once: every case runs on every backend (tests/contract/conftest.py's `place`):
docker, the bare host and the 2-node Slurm cluster of the real test host, and the in-memory backend. A new
backend is done when it passes this file.

The cases share one environment per backend (a module-scoped fixture): each case makes what it needs first (an
`up` that only reattaches when the case before left it running), so they pass in any order or split across
xdist workers, and a backend makes its environment a few times, not once per case.
"""

from __future__ import annotations

import json
import re
import signal
import threading
import time

import pytest
from places import Place

SIGNALS = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]


def no_traceback(text: str) -> None:
    assert "Traceback" not in text, text


# --- up, re-up, changed spec ------------------------------------------------------------------------------------

def test_up_makes_one_environment(place: Place):
    """From nothing: `up` makes it, and it runs. Leaves it running."""
    place.remove_everything()
    result = place.up()
    assert result["action"] == "created"
    assert result["status"]["state"] == "running"
    assert len(place.live()) == 1, place.live()
    rows = place.rows()
    assert [r["state"] for r in rows] == ["running"]


def test_re_up_reattaches(place: Place):
    """A running environment whose spec matches is reattached to, not made again."""
    before = place.up()
    again = place.up()
    assert again["action"] == "reattached"
    assert again["status"]["container"] == before["status"]["container"]
    assert len(place.live()) == 1


def test_changed_spec_is_shown_and_refused_without_a_terminal(place: Place):
    """A profile changed since `up`: the diff is shown, and without a terminal to confirm on, nothing is touched
    (exit 2 or 1, a message that says how to go on); `--yes` recreates it."""
    before = place.up()
    place.change_spec(1)
    refused = place.devenv("up", place.host, "--detach")
    no_traceback(refused.stderr)
    assert refused.returncode in (1, 2), refused.stderr
    assert "differs from" in refused.stderr and "--yes" in refused.stderr, refused.stderr
    assert place.rows()[0]["container"] == before["status"]["container"]
    recreated = place.up("--yes")
    assert recreated["action"] == "recreated"
    assert len(place.live()) == 1, place.live()


# --- exec ----------------------------------------------------------------------------------------------------------

def test_exec_returns_the_commands_exit_code_and_output(place: Place):
    place.up()   # each case makes what it needs (a reattach when the one before left it running)
    done = place.devenv("exec", place.host, "--", "sh", "-c", "echo out; echo err >&2; exit 7")
    assert done.returncode == 7, done.stderr
    assert done.stdout == "out\n"
    assert "err" in done.stderr


def test_exec_of_a_missing_command_is_127_with_one_line(place: Place):
    place.up()
    done = place.devenv("exec", place.host, "--", "devenv-no-such-command")
    assert done.returncode == 127, done.stderr
    said = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(said) == 1 and "devenv-no-such-command" in said[0], done.stderr


def test_exec_passes_stdin(place: Place):
    place.up()
    done = place.devenv("exec", place.host, "--", "sh", "-c", "tr a-z A-Z", stdin="piped in\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "PIPED IN\n"


def test_exec_streams_output_as_it_comes(place: Place):
    """The first line arrives while the command still runs: it waits for a file that is made only once the
    line was read here."""
    place.up()
    running = place.start("exec", place.host, "--", "sh", "-c",
                          "echo first; i=0; while [ ! -e .contract-go ] && [ $i -lt 600 ]; do sleep 0.1; "
                          "i=$((i+1)); done; [ -e .contract-go ] && echo saw-the-file || echo gave-up")
    try:
        running.wait_line(r"^first$", timeout=90)   # the command gives up waiting after 60 s
        assert running.proc.poll() is None, running.output
        place.ok("exec", place.host, "--", "touch", ".contract-go")
        assert running.finish() == 0, running.output
        # the file was made only after "first" was read here: a command that saw it printed "first" before
        # it ended (output returned at the end comes after the command gave up waiting)
        assert running.lines[-1] == "saw-the-file", running.output
    finally:
        running.proc.kill()
        place.devenv("exec", place.host, "--", "rm", "-f", ".contract-go")


# --- status --------------------------------------------------------------------------------------------------------

def test_status_shows_one_row_per_environment(place: Place):
    """After down and up again, whatever the engine or the scheduler still remembers of the first (an exited
    container, a cancelled job), status shows the environment once."""
    place.ok("down", place.host)
    place.up()
    rows = place.rows()
    assert len(rows) == 1, rows
    assert rows[0]["state"] == "running"


# --- two `up` at once --------------------------------------------------------------------------------------------

def test_two_up_at_once_make_one_environment(place: Place):
    """Two `up` of one environment in separate processes at the same moment: one environment, and both commands
    succeed (or one is refused with a clear message). `down --purge` then leaves nothing."""
    place.ok("down", place.host)
    rendezvous = place.home / f"rendezvous-{threading.get_ident()}"
    rendezvous.mkdir()
    both = [place.start("up", place.host, "--detach", extra_env={"DEVENV_MEMORY_RENDEZVOUS": str(rendezvous)})
            for _ in range(2)]
    codes = [run.finish(timeout=600) for run in both]
    for run in both:
        no_traceback(run.output)
    assert 0 in codes, [run.output for run in both]
    for code, run in zip(codes, both):
        if code != 0:
            assert "Error:" in run.output and "Hint:" in run.output, run.output
    assert len(place.live()) == 1, place.live()
    assert len(place.rows()) == 1
    place.ok("down", place.host, "--purge", "--yes")
    assert place.leftovers() == []


# --- down ----------------------------------------------------------------------------------------------------------

def test_down_twice(place: Place):
    """down removes it (the workspace kept); down again finds nothing and says so, with success."""
    place.up()
    place.ok("down", place.host)
    assert place.live() == []
    assert place.rows() == []
    again = place.ok("down", place.host)
    assert "nothing to remove" in again.stdout


def test_down_purge_leaves_nothing(place: Place):
    """Container or job, network, volume or workspace, the host's files, the laptop's state and ssh entry."""
    place.up()
    place.ok("down", place.host, "--purge", "--yes")
    assert place.leftovers() == []
    assert place.rows() == []


# --- signals at each wait of `up` ------------------------------------------------------------------------------

@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_signal_at_each_wait_of_up_leaves_nothing_the_next_up_cannot_finish(place: Place, sig: signal.Signals):
    """`up` interrupted (SIGINT, SIGTERM, SIGHUP) at each of its waits (building, queued, waiting for Jupyter:
    found by the progress line it prints): it says so and exits 128+N, a queued job is cancelled and said so
    ("cancelled job N"), and the next `up` finishes the environment: one, running."""
    for wait in place.waits:
        place.ok("down", place.host)
        extra = place.arrange(wait)
        try:
            running = place.start("up", place.host, "--detach", extra_env=extra)
            try:
                running.wait_line(wait.line, timeout=300)
            except BaseException:
                running.proc.kill()
                raise
            running.proc.send_signal(sig)
            code = running.finish()
        finally:
            after = place.release(wait)
        no_traceback(running.output)
        assert code == 128 + sig, f"{wait.name}: exit {code}:\n{running.output}"
        if wait.name == "queued":
            assert place.live() == [], place.live()
            assert re.search(r"cancelled job \d+", running.output, re.I), running.output
        place.ok("up", place.host, "--detach", extra_env=after, timeout=600)
        assert len(place.live()) == 1, (wait.name, place.live())
        assert [r["state"] for r in place.rows()] == ["running"], wait.name


def test_autostop_is_armed_or_refused_before_anything_changes(place: Place):
    """`up --autostop`: a backend that autostops arms its watcher (said in the notes; status shows its state)
    and `--no-autostop` ends it; one that does not refuses up front (exit 2 with a hint), leaving what runs."""
    before = place.up()
    armed = place.devenv("up", place.host, "--detach", "--json", "--autostop", "30m")
    no_traceback(armed.stderr)
    if armed.returncode == 2:   # only the in-memory backend has no host beside it to run a watcher on
        assert place.kind == "memory", armed.stderr
        assert "autostop is not available" in armed.stderr and "--no-autostop" in armed.stderr, armed.stderr
        assert place.rows()[0]["container"] == before["status"]["container"]
        return
    assert armed.returncode == 0, armed.stderr
    assert any(n.startswith("autostop: stop after 30 m idle") for n in json.loads(armed.stdout)["notes"])
    deadline = time.monotonic() + 120      # the watcher writes its state at its first sample
    while not place.rows()[0].get("autostop") and time.monotonic() < deadline:
        time.sleep(0.2)
    watching = place.rows()[0]["autostop"]
    assert watching["state"] == "watching" and watching["window_s"] == 1800, watching
    off = place.up("--no-autostop")
    assert "autostop turned off" in off["notes"]
    assert place.rows()[0]["autostop"] is None


def test_the_environment_ends_clean(place: Place):
    """The last case: `down --purge` after everything above leaves nothing."""
    place.ok("down", place.host, "--purge", "--yes")
    assert place.leftovers() == []
