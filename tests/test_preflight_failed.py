"""The error that stops `up` when its check fails: one line that says why, even where the table is not seen."""

from __future__ import annotations

from click.testing import CliRunner

from devenv.checks.report import CheckReport, CheckResult
from devenv.cli.progress import ProgressPrinter
from devenv.services.environments.contract import PreflightFailed

BUSY = CheckResult("gpu.choice", "1 free GPU", "fail", "only 0 of 1 on box are free: GPU 0 is busy with pid 538",
                   "use --allow-busy")
DISK = CheckResult("disk", "Free disk", "fail", "1.2 GB free", "free some space")
OK = CheckResult("ssh", "SSH reachable", "pass", "box")


def test_one_failed_check_is_named_with_what_was_seen():
    error = PreflightFailed(CheckReport("box", "cuda", [OK, BUSY]))
    assert error.message == ("box is not ready for 'cuda': 1 free GPU (only 0 of 1 on box are free: GPU 0 is busy "
                             "with pid 538)")


def test_several_failed_checks_are_named():
    assert PreflightFailed(CheckReport("box", "cuda", [BUSY, DISK])).message.endswith(": 1 free GPU, Free disk")


def test_the_failed_preflight_table_goes_to_stderr():
    runner = CliRunner()
    with runner.isolation() as (out, err, _):
        ProgressPrinter().checked(CheckReport("box", "cuda", [OK, BUSY]))
    assert out.getvalue() == b""
    assert b"GPU 0 is busy with pid 538" in err.getvalue() and b"use --allow-busy" in err.getvalue()
