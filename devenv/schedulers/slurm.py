"""Slurm through its own CLI on the login node (L1): sbatch, squeue, scontrol, scancel, sinfo, sacctmgr, srun.

devenv schedules nothing: it asks Slurm, in Slurm's machine-readable forms, and parses the answers with the
pure code in devenv/cluster. Every command goes through the Connection it is given (the login node); values
reach the command line only as validated `--option=value` words (devenv/cluster/slurm_job.py).
"""

from __future__ import annotations

import re
import shlex
import time

from devenv.cluster import slurm_text
from devenv.cluster.errors import JobRejected
from devenv.cluster.slurm_job import JobRequest, check_name, step_command
from devenv.cluster.slurm_text import Job, PartitionInfo
from devenv.errors import DevenvError
from devenv.remote.base import Connection, Result

TIMEOUT = 60.0


class Slurm:
    def __init__(self, conn: Connection, host: str):
        self.conn = conn
        self.host = host

    # --- the cluster --------------------------------------------------------------------------------

    def version(self) -> str | None:
        """Slurm's version on the login node; None when there is no Slurm there (no sinfo)."""
        result = self.conn.run("sinfo --version", timeout=TIMEOUT)
        return slurm_text.parse_version(result.stdout) if result.ok else None

    def partitions(self) -> list[PartitionInfo]:
        parts = self._run("scontrol --oneliner show partition")
        nodes = self._run("scontrol --oneliner show node")
        return slurm_text.summarize_partitions(slurm_text.parse_records(parts.stdout),
                                               slurm_text.parse_records(nodes.stdout))

    def limits(self) -> tuple[bool, list[dict[str, str]], str]:
        """(accounting exists, the user's associations, detail): from sacctmgr, when accounting is configured."""
        fields = "Cluster,Account,Partition,QOS,GrpTRES,MaxTRES,MaxJobs,MaxSubmit,MaxWall"
        result = self.conn.run(f"sacctmgr --noheader --parsable2 show association user=\"$(id -un)\" "
                               f"format={fields}", timeout=TIMEOUT)
        text = (result.stdout + result.stderr).strip()
        if not result.ok or "accounting_storage" in text:
            first = text.splitlines()[0] if text else f"exit code {result.exit_code}"
            return False, [], first
        rows = []
        names = fields.lower().split(",")
        for line in result.stdout.splitlines():
            values = line.split("|")
            if len(values) == len(names):
                rows.append(dict(zip(names, values)))
        return True, rows, f"{len(rows)} association(s)"

    def hostnames(self, nodelist: str) -> list[str]:
        """'node[1-2]' -> ['node1', 'node2'] (Slurm expands its own host lists)."""
        if not re.fullmatch(r"[A-Za-z0-9_.,\[\]-]+", nodelist):
            raise DevenvError(f"unexpected node list from Slurm: {nodelist!r}", "this is a bug in devenv")
        if "[" not in nodelist:   # plain names: nothing to expand, no round trip (a job's start waits on it)
            return [name for name in nodelist.split(",") if name]
        result = self._run(f"scontrol show hostnames {shlex.quote(nodelist)}")
        return [line.strip() for line in result.stdout.splitlines() if line.strip()]

    # --- jobs -----------------------------------------------------------------------------------------

    def submit(self, request: JobRequest, script: str) -> str:
        """sbatch the script (on stdin); the job id. Slurm's refusal becomes JobRejected with its own words."""
        result = self.conn.run(request.command(), stdin=script, timeout=TIMEOUT)
        if not result.ok:
            raise self._rejected(request, result)
        try:
            return slurm_text.parse_sbatch(result.stdout)
        except ValueError as exc:
            raise DevenvError(f"sbatch on {self.host}: {exc}", "run sbatch by hand there to see why") from None

    def jobs(self, name: str) -> list[Job]:
        """The user's jobs with this name, in every state Slurm still remembers (ended ones for MinJobAge)."""
        check_name("job name", name)
        result = self._run(f"squeue --me --noheader --states=all --name={shlex.quote(name)} "
                           f"--format={shlex.quote(slurm_text.JOB_FORMAT)}")
        return slurm_text.parse_jobs(result.stdout)

    def jobs_by_prefix(self, prefix: str) -> list[Job]:
        """The user's jobs whose name starts with prefix (squeue has no prefix filter: filtered here)."""
        result = self._run(f"squeue --me --noheader --states=all --format={shlex.quote(slurm_text.JOB_FORMAT)}")
        return [j for j in slurm_text.parse_jobs(result.stdout) if j.name.startswith(prefix)]

    def job(self, job_id: str) -> Job | None:
        """One job by id; None when Slurm has forgotten it."""
        if not job_id.isdigit():
            return None
        for attempt in (1, 2):
            try:
                return self._job_once(job_id)
            except DevenvError:
                if attempt == 2:
                    raise
                time.sleep(1.0)   # a busy slurmctld ("Socket timed out"): once more before it is news
        return None

    def _job_once(self, job_id: str) -> Job | None:
        """None only when Slurm says it does not know the id; a squeue or scontrol that failed otherwise (a
        busy or restarting slurmctld) raises: a failed look is not a job that ended."""
        result = self.conn.run(f"squeue --noheader --states=all --jobs={job_id} "
                               f"--format={shlex.quote(slurm_text.JOB_FORMAT)}", timeout=TIMEOUT)
        found = slurm_text.parse_jobs(result.stdout) if result.ok else []
        if found:
            return found[0]
        if not result.ok and not _unknown_job(result):
            raise self._failed(f"squeue --jobs={job_id}", result)
        shown = self.conn.run(f"scontrol --oneliner show job {job_id}", timeout=TIMEOUT)
        records = slurm_text.parse_records(shown.stdout) if shown.ok else []
        if records:
            return slurm_text.job_from_record(records[0])
        if not shown.ok and not _unknown_job(shown):
            raise self._failed(f"scontrol show job {job_id}", shown)
        return None

    def queue_spot(self, job_id: str) -> slurm_text.QueueSpot:
        """How long a pending job has waited and its place in its partition's queue (one round trip); an empty
        QueueSpot when Slurm does not say (a failed squeue is not worth failing a wait for)."""
        result = self.conn.run(slurm_text.QUEUE_COMMAND, timeout=TIMEOUT)
        return slurm_text.queue_spot(job_id, result.stdout) if result.ok else slurm_text.QueueSpot()

    def cancel(self, job_id: str, wait: float = 30.0) -> Job | None:
        """scancel, then wait (bounded) until Slurm says it is no longer pending or running."""
        if not job_id.isdigit():
            raise DevenvError(f"'{job_id}' is not a job id", "this is a bug in devenv")
        self._run(f"scancel {job_id}")
        deadline = time.monotonic() + wait
        while True:
            job = self.job(job_id)
            if job is None or job.phase == "ended" or time.monotonic() > deadline:
                return job
            time.sleep(0.3)

    def step(self, job_id: str, node: str, argv: list[str], timeout: float = TIMEOUT,
             stdin: str | None = None) -> Result:
        """Run argv as one task on one node of a running job (srun --overlap: beside the job's own steps)."""
        return self.conn.run(step_command(job_id, node, argv), timeout=timeout, stdin=stdin)

    # --- internals ------------------------------------------------------------------------------------

    def _run(self, command: str) -> Result:
        result = self.conn.run(command, timeout=TIMEOUT)
        if not result.ok:
            raise self._failed(command, result)
        return result

    def _failed(self, command: str, result: Result) -> DevenvError:
        said, hint = slurm_text.command_failure(result.stderr or result.stdout, result.exit_code)
        return DevenvError(f"`{command.split()[0]}` failed on {self.host}: {said}", hint)

    def _rejected(self, request: JobRequest, result: Result) -> JobRejected:
        lines = [ln.strip() for ln in (result.stderr + result.stdout).splitlines() if ln.strip()]
        said = "; ".join(ln.removeprefix("sbatch: error: ") for ln in lines[-2:]) or f"exit code {result.exit_code}"
        hint = "fix the host profile's `slurm:` settings (see `devenv check " + self.host + "` for the cluster)"
        if "partition" in said.lower():
            try:
                known = ", ".join(p.name + ("*" if p.default else "") for p in self.partitions())
            except DevenvError:
                known = "?"
            hint = f"partitions on {self.host}: {known} (* = default); set slurm.partition in the host profile"
        elif "gres" in said.lower():
            hint = (f"the cluster has no such GPU resource in that partition; `devenv check {self.host}` lists "
                    "each partition's GPUs (set slurm.gpus_per_node: 0 for a CPU job)")
        return JobRejected(f"Slurm on {self.host} refused the job: {said}", hint)


def _unknown_job(result: Result) -> bool:
    """Slurm's answer for an id it does not know (or no longer remembers: MinJobAge)."""
    return "Invalid job id" in result.stderr + result.stdout
