"""A run script whose answer does not come back. The real case is a connection lost while the script runs (the
laptop's network, the host's sshd): the connection raises ConnectError (docker's exec_inspect cannot be asked,
or the exec has no exit code; an SSH channel ends without an exit status), it never answers "exit 0, nothing".
A start cut so may have started the run (the launcher detaches it): the error names the run's id, so that the
user finds it instead of starting a second one. An empty answer with exit 0 was Docker's exec stream read ahead
by paramiko's buffered file (fixed in runtimes/docker_api.ChannelReader, tests/test_docker_api_reader.py): it is
no longer asked again, and is an error, never an empty log. The scripts run for real under sh in a folder here,
as the in-memory backend runs them."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from devenv.env import runs as model
from devenv.errors import ConnectError, DevenvError
from devenv.services.environments.contract import RunPlace
from devenv.services.runs import Runs


class LossyPlace:
    """Runs the scripts under sh here; `lose` says which of the next calls have their output dropped, `cut`
    which lose their connection (both after running: the command did its work, its answer did not come back)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.lose: list[bool] = []
        self.cut: list[bool] = []

    def _sh(self, text: str, args: list[str]) -> tuple[int, str, str]:
        done = subprocess.run(["sh", "-c", text, "devenv", *args], capture_output=True, text=True,
                              cwd=self.folder, timeout=60, stdin=subprocess.DEVNULL)
        if self.cut and self.cut.pop(0):
            raise ConnectError("the connection to box was lost while `sh -c ...` ran", "re-run the command")
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


def test_a_start_whose_connection_was_lost_names_the_run_it_may_have_started(place_and_runs):
    place, runs = place_and_runs
    place.cut = [True]                        # the launcher ran (the run is detached), then the connection went
    with pytest.raises(ConnectError) as lost:
        runs.start(["sh", "-c", "echo started anyway"])
    started = runs.list()
    assert len(started) == 1, started
    run_id = started[0].id
    assert f"the run {run_id} may have started" in lost.value.message, lost.value.message
    assert lost.value.hint is not None and "`devenv runs box --env cpu`" in lost.value.hint
    assert lost.value.exit_code == ConnectError.exit_code
    assert finished(runs, run_id).exit_code == 0          # it runs on: the user finds it with the id named
    assert runs.read(run_id, 0).data == b"started anyway\n"


def test_an_empty_answer_to_a_read_is_an_error_not_an_empty_log(place_and_runs):
    place, runs = place_and_runs
    run_id = runs.start(["sh", "-c", "echo hello"])
    finished(runs, run_id)
    place.lose = [True]                       # exit 0 and nothing: not what a read script or a lost connection says
    with pytest.raises(DevenvError, match="came back unreadable"):
        runs.read(run_id, 0)
    assert runs.read(run_id, 0).data == b"hello\n"


def test_a_start_that_started_nothing_still_fails(place_and_runs, monkeypatch):
    place, runs = place_and_runs
    monkeypatch.setattr(place, "run_place", None)
    runs.place = RunPlace(runs_dir=str(place.folder / "runs"), script=place._sh,
                          launch=lambda text, args: (0, "", ""))   # nothing ran, nothing said
    with pytest.raises(DevenvError, match="could not be started"):
        runs.start(["true"])
    assert runs.list() == []
