"""The monitor's runs view (key r) with Textual's Pilot: real detached runs, started by services/runs.py's Runs
with devenv.env.runs' scripts on a run place on this machine (sh in a temporary folder, as the in-memory backend
runs them), listed, their last lines shown, and one's log followed by byte offset in a worker while the screen
keeps answering keys. Every wait is on an event (a row, a line, a state), bounded."""

from __future__ import annotations

import asyncio
import functools
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from monitor_helpers import FixedSampler, recorded_snapshot
from textual.widgets import DataTable, Label, RichLog, Static

from devenv.errors import DevenvError
from devenv.services.environments.contract import RunPlace
from devenv.services.runs import Runs
from devenv.tui.monitor_app import MonitorServices, create_monitor_app
from devenv.tui.monitor_screens import HelpScreen
from devenv.tui.runs_screen import LineSplitter, RunLogScreen, RunsScreen, last_lines

pytestmark = pytest.mark.timeout(90)
SIZE = (130, 40)


def run_async(test):
    @functools.wraps(test)
    def wrapper(*args, **kwargs):
        asyncio.run(test(*args, **kwargs))
    return wrapper


class HerePlace:
    """A backend whose runs live in a folder on this machine: the run scripts run under sh, where the test is."""

    def __init__(self, folder: Path):
        self.folder = folder

    def _sh(self, text: str, args: list[str]) -> tuple[int, str, str]:
        done = subprocess.run(["sh", "-c", text, "devenv", *args], capture_output=True, text=True,
                              cwd=self.folder, timeout=60, stdin=subprocess.DEVNULL)
        return done.returncode, done.stdout, done.stderr

    def run_place(self, env) -> RunPlace:
        return RunPlace(runs_dir=str(self.folder / "runs"), script=self._sh, launch=self._sh)


@pytest.fixture
def runs(tmp_path: Path):
    made = Runs(HerePlace(tmp_path), SimpleNamespace(name="cpu"), "h200-box")  # type: ignore[arg-type]
    started: list[str] = []
    yield made, tmp_path, started
    for run in made.list():       # nothing left running after the test
        if not run.finished:
            made.cancel(run.id, grace_s=1)


def test_the_last_piece_comes_once_the_host_knows_it_was_read(runs):
    """pieces() (the log view's follow) marks the run's end as seen before it hands the last piece over: the view
    said "the run ended" while --then could still be waiting for the follower (the log view's test failed now
    and then; this one failed each time before)."""
    made, folder, _ = runs
    run_id = made.start(["sh", "-c", "echo one"])
    for piece in made.pieces(run_id):
        if piece.over:
            assert (folder / "runs" / run_id / "seen").exists()
    assert piece.over and piece.exit_code == 0


def services_of(runs: Runs, calls: list[tuple] | None = None) -> MonitorServices:
    calls = [] if calls is None else calls

    def list_runs(host):
        calls.append(("list", host))
        return runs.list()

    def run_tail(host, run_id):
        calls.append(("tail", host, run_id))
        return runs.tail(run_id)

    def follow_run(host, run_id, offset):
        calls.append(("follow", host, run_id, offset))
        return runs.pieces(run_id, offset)

    return MonitorServices(list_runs=list_runs, run_tail=run_tail, follow_run=follow_run, env_of=lambda h: "cpu")


def make_app(services: MonitorServices):
    snap = recorded_snapshot("h200-box", n_gpus=2)
    return create_monitor_app(["h200-box"], lambda h: FixedSampler(snap), services, redraw_every=3600)


async def until(pilot, predicate, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        await pilot.pause(0.02)
        if predicate():
            return
    raise AssertionError(f"timed out waiting for {what}")


def wait_for(predicate, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def table_rows(screen: RunsScreen) -> list[list[str]]:
    table = screen.query_one("#runs-table", DataTable)
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


def log_lines(screen: RunLogScreen) -> list[str]:
    return [strip.text for strip in screen.query_one("#run-log", RichLog).lines]


def ended_run(runs: Runs, *argv: str, name: str | None = None) -> str:
    run_id = runs.start(list(argv), name=name)
    wait_for(lambda: runs.find(run_id).finished, what=f"run {run_id} to end")
    return run_id


def test_lines_split_across_reads_and_binary_bytes():
    split = LineSplitter()
    assert split.feed(b"one\ntw") == ["one"]
    assert split.feed("o é\n".encode()[:-2]) == []            # 'é' cut in the middle: kept for the next read
    assert split.feed("é\n".encode()[1:]) == ["two é"]
    assert split.feed(b"\xff\x00x") == []
    assert split.flush() == ["\ufffd\x00x"]
    assert last_lines(b"a\nb\nc\n", 2) == "b\nc"


@run_async
async def test_r_lists_the_environments_runs_with_state_duration_and_last_lines(runs):
    runs_, folder, _ = runs
    done = ended_run(runs_, "sh", "-c", "echo first line; echo failing >&2; exit 3", name="failing")
    live = runs_.start(["sh", "-c", "echo still going; i=0; while [ ! -e go ]; do sleep 0.05; done"],
                       name="trainer")
    calls: list[tuple] = []
    app = make_app(services_of(runs_, calls))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("r")
        await until(pilot, lambda: isinstance(app.screen, RunsScreen) and app.screen.loaded, what="the runs view")
        screen = app.screen
        assert isinstance(screen, RunsScreen)
        await until(pilot, lambda: len(table_rows(screen)) == 2, what="two rows")
        rows = {row[0]: row for row in table_rows(screen)}
        assert rows[live][1:3] == ["trainer", "running"], rows
        assert rows[done][1:3] == ["failing", "exited 3"], rows
        assert rows[done][5] == "sh -c 'echo first line; echo failing >&2; exit 3'"
        assert rows[live][4].endswith("s"), rows[live]      # a duration, counting (the run has not ended)
        assert ("list", "h200-box") in calls
        # the highlighted run's last lines under the list; the other's once it is highlighted (ids started in the
        # same second have no order between them: each row is reached by its place in the table)
        tail = screen.query_one("#runs-tail", Static)
        table = screen.query_one("#runs-table", DataTable)
        expect = {live: "still going", done: "first line\nfailing"}
        for run_id in sorted(expect, key=lambda r: r != screen.highlighted().id):
            table.move_cursor(row=table.get_row_index(run_id))
            await until(pilot, lambda r=run_id: str(tail.render()) == expect[r], what=f"{run_id}'s last lines")
        assert ("tail", "h200-box", done) in calls
        (folder / "go").touch()      # the run ends; the list, asked again, says so
        await until(pilot, lambda: runs_.find(live).finished, what="the live run to end")
        await pilot.press("r")
        await until(pilot, lambda: {r[0]: r for r in table_rows(screen)}[live][2] == "exited 0",
                    what="the ended state after a refresh")
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, RunsScreen), what="back to the hosts")


@run_async
async def test_enter_follows_a_runs_log_to_its_end_while_the_screen_answers(runs):
    """The log view follows by byte offset in a worker: while a read waits on the host for new output, the
    screen still takes keys; lines written after it opened come in order, once, and the end shows the code."""
    runs_, folder, _ = runs
    run_id = runs_.start(["sh", "-c", "echo step 1; echo step 2; while [ ! -e go ]; do sleep 0.05; done; "
                                      "i=3; while [ $i -le 200 ]; do echo step $i; i=$((i+1)); done; "
                                      "printf 'no end'; exit 7"], name="train")
    calls: list[tuple] = []
    app = make_app(services_of(runs_, calls))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("r")
        await until(pilot, lambda: isinstance(app.screen, RunsScreen) and len(table_rows(app.screen)) == 1,
                    what="the run listed")
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, RunLogScreen), what="the log view")
        screen = app.screen
        assert isinstance(screen, RunLogScreen)
        await until(pilot, lambda: log_lines(screen)[:2] == ["step 1", "step 2"], what="the first lines")
        state = screen.query_one("#run-state", Label)
        assert "running" in str(state.render())
        # the follow waits on the host for more; the screen answers a key meanwhile (help opens and closes)
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen), what="help over the log view")
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is screen, what="back to the log view")
        (folder / "go").touch()
        await until(pilot, lambda: screen.ended is not None, what="the run's end in the log view")
        assert log_lines(screen) == [f"step {i}" for i in range(1, 201)] + ["no end"]
        assert "exited 7" in str(state.render())
        assert screen.received == runs_.tail(run_id).size
        assert ("follow", "h200-box", run_id, 0) in calls
        assert (folder / "runs" / run_id / "seen").exists()    # as `logs -f`: --then may go on now
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, RunsScreen), what="back to the runs")


@run_async
async def test_leaving_the_log_view_leaves_the_run_running(runs):
    runs_, folder, _ = runs
    run_id = runs_.start(["sh", "-c", "echo waiting; while [ ! -e go ]; do sleep 0.05; done; echo after"])
    app = make_app(services_of(runs_))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("r")
        await until(pilot, lambda: isinstance(app.screen, RunsScreen) and len(table_rows(app.screen)) == 1,
                    what="the run listed")
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, RunLogScreen) and log_lines(app.screen) == ["waiting"],
                    what="the first line")
        await pilot.press("escape", "escape")
        await until(pilot, lambda: not isinstance(app.screen, (RunsScreen, RunLogScreen)), what="the hosts")
    assert runs_.find(run_id).phase == "running"
    (folder / "go").touch()
    wait_for(lambda: runs_.find(run_id).finished, what="the run's end")
    assert runs_.read(run_id, 0).data == b"waiting\nafter\n"


@run_async
async def test_runs_key_without_the_service_or_with_a_failing_host_says_so():
    app = make_app(MonitorServices())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("r")
        await until(pilot, lambda: any("runs view" in m for _, _, m in app.notified), what="the notice")
        assert not isinstance(app.screen, RunsScreen)

    def unreachable(host):
        raise DevenvError(f"cannot connect to {host}", "check the host")

    app = make_app(MonitorServices(list_runs=unreachable))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("r")
        await until(pilot, lambda: isinstance(app.screen, RunsScreen) and app.screen.loaded, what="the answer")
        note = str(app.screen.query_one("#runs-note", Label).render())
        assert "cannot connect to h200-box" in note and "check the host" in note
        await pilot.press("f")             # nothing to follow: a notice, no crash
        await until(pilot, lambda: any("no run selected" in m for _, _, m in app.notified), what="the notice")
