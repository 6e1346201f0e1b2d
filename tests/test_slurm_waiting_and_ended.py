"""A pending devenv job in `monitor` (a job-pending row with Slurm's reason, not "no devenv job runs"), and a
tunnel whose job ended from outside (exit 1 and `devenv up CLUSTER`, not a reconnect). Slurm's
lines are in devenv's squeue format as the test cluster printed them while another user's jobs filled it."""

from __future__ import annotations

import pytest

from devenv.cli.envcommon import hold
from devenv.cluster.slurm_text import QueueSpot, parse_jobs
from devenv.errors import ConnectError, DevenvError
from devenv.services.environments.slurm.places import Waiting, no_job_snapshot
from devenv.services.monitor import JOB_PENDING, NO_JOB


def test_a_cluster_whose_devenv_job_waits_shows_it_with_reason_wait_and_place():
    job, = parse_jobs("21|devenv-me-cpu|PENDING|Priority||10:00|N/A|10:00|1|debug|devenv:x")
    snapshot = no_job_snapshot("hpc", [Waiting(job, QueueSpot(65, 2, 2))], clock=lambda: 0.0)
    assert snapshot.state == JOB_PENDING
    assert snapshot.message == ("hpc: job 21 (devenv-me-cpu) pending 1m05s: Priority (jobs of higher priority are "
                                "ahead of it); position 2 of 2 in partition debug; no estimated start yet")
    assert no_job_snapshot("hpc", [], clock=lambda: 0.0).state == NO_JOB


class Tunnel:
    kind = "relay"

    def __init__(self, ended: str | None):
        self.ended = ended
        self.closed = False

    def alive(self) -> bool:
        return False

    def close(self) -> None:
        self.closed = True


def test_a_tunnel_whose_job_ended_is_exit_1_with_up_as_the_hint():
    ended = "job 21 for 'cpu' on hpc ended: CANCELLED: it was cancelled (scancel)"
    with pytest.raises(DevenvError) as caught:
        hold(Tunnel(ended), "hpc", reopen=_never)   # type: ignore[arg-type]
    assert not isinstance(caught.value, ConnectError) and caught.value.exit_code == 1
    assert ended in caught.value.message and "`devenv up hpc`" in (caught.value.hint or "")
    assert "jupyter" not in (caught.value.hint or "")


def _never(forwards):
    raise AssertionError("a tunnel whose job ended is not reopened")
