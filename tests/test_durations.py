"""One way to write a duration (env.durations.compact_duration), in the runs' TIME column, the background tunnels'
age and Slurm's queue wait (which says '42 s' in a sentence)."""

from __future__ import annotations

import pytest

from devenv.cluster import slurm_text
from devenv.env import runs
from devenv.env.durations import compact_duration


@pytest.mark.parametrize(("seconds", "text"), [(0, "0s"), (42.9, "42s"), (59, "59s"), (60, "1m00s"), (310, "5m10s"),
                                               (3599, "59m59s"), (3600, "1h00m"), (3700, "1h01m"),
                                               (90061, "25h01m")])
def test_compact_duration_cuts_to_whole_seconds_minutes_and_hours(seconds: float, text: str):
    assert compact_duration(seconds) == text


def test_a_run_without_a_duration_is_a_dash_and_one_with_is_compact():
    assert runs.format_duration(None) == "-"
    assert runs.format_duration(310.5) == "5m10s" and runs.format_duration(5) == "5s"


def test_a_slurm_wait_under_a_minute_says_its_seconds_as_a_sentence_does():
    assert slurm_text.duration(25) == "25 s"
    assert slurm_text.duration(65) == "1m05s" and slurm_text.duration(3700) == "1h01m"
