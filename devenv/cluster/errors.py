"""Errors of the scheduler paths, each with its documented exit code (README, exit codes)."""

from __future__ import annotations

from devenv.errors import DevenvError


class JobRejected(DevenvError):
    """Slurm refused the job as asked (unknown partition, GRES it does not have, a limit): the profile's fault."""

    exit_code = 2


class JobEnded(DevenvError):
    """The environment's job is over (time limit, node failure, preemption, cancelled): nothing runs any more."""

    exit_code = 1


class QueueTimeout(DevenvError):
    """The job did not start within the bounded wait; devenv cancelled it (no orphan job is left queued)."""

    exit_code = 1
