"""A Connection to one node of a running Slurm job (L1): every command runs there as one task under
`srun --overlap --jobid J --nodelist NODE`, through the login node's connection. No ssh to the compute node,
no port opened: what the cluster lets a user do on a node of their own job.

The monitor's samplers use it as they use a host's connection: `run` for one-shot queries, `stream` for the
long-lived nvidia-smi and process loops (one srun per stream). Ending a stream TERMs the srun on the login
node, and srun then cancels its step on the node. A connection that just goes away is another matter: srun
blocks SIGPIPE and outlives its ssh session, and its step would run in the job until the job ends; so each
stream's srun is tied to its session (tied_to_session), and ends within seconds of it.
"""

from __future__ import annotations

from collections.abc import Generator

from devenv.cluster.slurm_job import step_command
from devenv.errors import CommandFailed, DevenvError
from devenv.remote.base import DEFAULT_TIMEOUT, Connection, Result


def tied_to_session(command: str) -> str:
    """command (a srun) for the login node's shell, TERMed when this ssh session ends: the shell's parent is
    the session's sshd; once that is gone the shell has another parent, checked every 2 s (one sleep)."""
    return (f"{command} & p=$!; s=$PPID; "
            'while kill -0 "$p" 2>/dev/null; do '
            '[ "$(cut -d" " -f4 /proc/$$/stat 2>/dev/null)" = "$s" ] || { kill -TERM "$p"; break; }; sleep 2; '
            'done; wait "$p"')


class StepConnection:
    """Commands on `node` of job `job_id`, run by the login node's connection `login`.

    owns: close() closes `login` too (a connection made for this node alone, so that closing it ends this
    node's streams only, as closing a host's connection does for a host); else close() leaves it open."""

    def __init__(self, login: Connection, job_id: str, node: str, name: str, *, owns: bool = False):
        self.login = login
        self.job_id = job_id
        self.node = node
        self.name = name
        self.owns = owns
        step_command(job_id, node, ["true"])   # a bad job id or node name fails here, not at the first command

    def _command(self, command: str) -> str:
        return step_command(self.job_id, self.node, ["sh", "-c", command])

    def run(self, command: str, *, timeout: float = DEFAULT_TIMEOUT, check: bool = False,
            stdin: bytes | str | None = None, env: dict[str, str] | None = None) -> Result:
        done = self.login.run(self._command(command), timeout=timeout, stdin=stdin, env=env)
        result = Result(command, done.stdout, done.stderr, done.exit_code, done.startup_s)
        if check and not result.ok:
            raise CommandFailed(result)
        return result

    def stream(self, command: str, *, timeout: float | None = None) -> Generator[str, None, None]:
        return self.login.stream(tied_to_session(self._command(command)), timeout=timeout)

    def put(self, data: bytes, remote_path: str, mode: int = 0o644) -> None:
        raise DevenvError(f"{self.name}: files are written from the login node, not through a job step",
                          "this is a bug in devenv")

    def open(self) -> None:
        opener = getattr(self.login, "open", None)
        if opener is not None:
            opener()

    def close(self) -> None:
        if self.owns:
            self.login.close()

    def __enter__(self) -> StepConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<StepConnection {self.name}: job {self.job_id} node {self.node} via {self.login!r}>"
