"""A run script whose output is lost on the way (exit 0, nothing printed: a Docker exec stream that ended before
the command's output, seen once in the behaviour suite's docker follow case and once at a docker `run` under load).
services/runs.py tells that from a real answer: a read is asked again, a start looks for the run it named. The
scripts run for real under sh in a folder here, as the in-memory backend runs them."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from devenv.env import runs as model
from devenv.errors import DevenvError
from devenv.services.environments.contract import RunPlace
from devenv.services.runs import Runs, ScriptFailed


class LossyPlace:
    """Runs the scripts under sh here; `lose` says which of the next calls have their output dropped (after
    running: the command did its work, its answer did not come back)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.lose: list[bool] = []
        self.calls = 0

    def _sh(self, text: str, args: list[str]) -> tuple[int, str, str]:
        self.calls += 1
        done = subprocess.run(["sh", "-c", text, "devenv", *args], capture_output=True, text=True,
                              cwd=self.folder, timeout=60, stdin=subprocess.DEVNULL)
        if self.lose and self.lose.pop(0):
            return done.returncode, "", ""
        return done.returncode, done.stdout, done.stderr

    def run_place(self, env) -> RunPlace:
        return RunPlace(runs_dir=str(self.folder / "runs"), script=self._sh, launch=self._sh)


@pytest.fixture
def place_and_runs(tmp_path: Path):
    place = LossyPlace(tmp_path)
    runs = Runs(place, SimpleNamespace(name="cpu"), "box")  # type: ignore[arg-type]
    yield place, runs
    for run in runs.list():
        if not run.finished:
            runs.cancel(run.id, grace_s=1)


def finished(runs: Runs, run_id: str) -> model.Run:
    piece = runs.read(run_id, 0, wait_s=30)   # waits on the host for the end (bounded), not a sleep here
    while not piece.over:
        piece = runs.read(run_id, 0, wait_s=30)
    return runs.find(run_id)


def test_a_read_whose_output_was_lost_is_asked_again(place_and_runs):
    place, runs = place_and_runs
    run_id = runs.start(["sh", "-c", "echo hello"])
    finished(runs, run_id)
    place.lose = [True]                       # the next read's answer is dropped once
    piece = runs.read(run_id, 0)
    assert piece.data == b"hello\n" and piece.state == "exited" and piece.exit_code == 0


def test_a_read_that_comes_back_empty_twice_is_a_failed_way_not_a_garbled_log(place_and_runs):
    place, runs = place_and_runs
    run_id = runs.start(["sh", "-c", "echo hello"])
    finished(runs, run_id)
    place.lose = [True, True]
    with pytest.raises(ScriptFailed, match="came back empty twice"):   # follow() reconnects on this
        runs.read(run_id, 0)


def test_a_start_whose_answer_was_lost_finds_the_run_it_started(place_and_runs):
    place, runs = place_and_runs
    place.lose = [True]                       # the launcher ran, its printed id did not come back
    run_id = runs.start(["sh", "-c", "echo started anyway"])
    assert [r.id for r in runs.list()] == [run_id]
    assert finished(runs, run_id).exit_code == 0
    assert runs.read(run_id, 0).data == b"started anyway\n"


def test_a_start_that_started_nothing_still_fails(place_and_runs, monkeypatch):
    place, runs = place_and_runs
    monkeypatch.setattr(place, "run_place", None)
    runs.place = RunPlace(runs_dir=str(place.folder / "runs"), script=place._sh,
                          launch=lambda text, args: (0, "", ""))   # nothing ran, nothing said
    with pytest.raises(DevenvError, match="could not be started"):
        runs.start(["true"])
    assert runs.list() == []
