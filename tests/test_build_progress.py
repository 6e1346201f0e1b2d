"""`up`'s image build shows its steps, not every line (issue 28, point 7): pip's "Requirement already
satisfied" goes to a build log named once; `devenv -v` shows every line as it comes."""

from __future__ import annotations

import click
from click.testing import CliRunner

from devenv.cli.progress import VERBOSE, ProgressPrinter
from devenv.env.info import ProgressEvent

LINES = ["Step 1/3 : FROM devenv-base:bookworm", "Requirement already satisfied: pip in /opt/venv",
         "Requirement already satisfied: numpy in /opt/venv", "Step 2/3 : COPY ready.py /usr/local/bin/",
         "Successfully built 0123456789ab"]


def _run(verbose_flag: bool) -> str:
    @click.command()
    def build() -> None:
        click.get_current_context().meta[VERBOSE] = verbose_flag
        printer = ProgressPrinter()
        for line in LINES:
            printer.progress(ProgressEvent(text=line))
        printer.done()

    return CliRunner().invoke(build, []).output


def test_steps_only_and_the_rest_in_a_log_unless_verbose(isolated_home):
    shown = _run(False)
    assert "Step 1/3" in shown and "Step 2/3" in shown
    assert "Requirement already satisfied" not in shown and "Successfully built" not in shown
    log = isolated_home / "state" / "logs" / "build.log"
    assert f"each step's output: {log}" in shown and shown.count("each step's output") == 1
    assert log.read_text().splitlines() == [LINES[1], LINES[2], LINES[4]]
    assert log.stat().st_mode & 0o777 == 0o600
    every = _run(True)
    assert all(line in every for line in LINES) and "each step's output" not in every
