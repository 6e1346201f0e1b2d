"""Environments as Slurm jobs (L2): one job per environment, the bare-host runtime inside the allocation.

Slurm is the truth, as labels are for containers: the job's name is `devenv-<owner>-<env>` and its comment
carries the spec hash, so `status` and re-`up` work from `squeue` alone. The env's files (token 0600, Jupyter
config, launcher, one job-<id>.json per job saying node and port, the job's log) live in ~/.devenv/envs/<key>
on the cluster's shared file system, written from the login node and read on the compute node.

  no live job                      -> check python, write the files, sbatch, wait for the start, wait for Jupyter
  pending or running, same spec    -> wait for it / reattach
  live, different spec             -> diff, confirm, scancel, submit again (workspace kept)
  the job's own end                -> reported with Slurm's state and reason (TIMEOUT, NODE_FAIL, PREEMPTED, ...)

The wait for the start is bounded (slurm.queue_timeout); a job that cannot start (hopeless pending reason) or
does not start in time is cancelled before the error is raised: no orphan job stays queued.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from devenv.cluster import slurm_job, slurm_text
from devenv.cluster.errors import JobEnded, JobRejected, QueueTimeout
from devenv.cluster.slurm_job import JobRequest, SlurmSettings
from devenv.cluster.slurm_text import Job
from devenv.config.profiles import EnvProfile, HostProfile
from devenv.env import jupyter_scripts
from devenv.env import spec as envspec
from devenv.env import state as envstate
from devenv.env.info import EnvStatus
from devenv.errors import ConnectError, DevenvError, NotConfirmed
from devenv.services import jupyter
from devenv.services.background import Background
from devenv.services.environments import autostop
from devenv.services.environments.contract import (
    Check,
    CommandTarget,
    Events,
    ExecEntry,
    ExecStream,
    Existing,
    JupyterAccess,
    Removed,
    RunPlace,
    Shell,
    SshTarget,
    Traits,
    UpOptions,
    UpResult,
    exec_script,
    stream_output,
)
from devenv.services.environments.flow import FlowBackend

if TYPE_CHECKING:
    from devenv.checks.report import CheckReport, CheckResult
    from devenv.remote.base import Connection, Result
    from devenv.remote.envkey import EnvKey
    from devenv.remote.relay import Spare
    from devenv.runtimes.host_runtime import HostRuntime, PreparedFiles
    from devenv.schedulers.slurm import Slurm
    from devenv.services.monitor import JobPlace

LIVE = ("pending", "running", "ending")
REPORT_EVERY_S = 10.0   # a pending job's line while `up` waits: at this cadence, and when the reason changes
FIRST_REPORT_S = 3.0    # the first line waits for Slurm's first reason at most this long
# The login node lost while `up` waits for its job: re-dialled after each of these pauses (30 s in all) to cancel
# the job; a job it could not cancel is remembered here (env state `lost_job`) for status, up and down to name.
RECONNECT_PAUSES_S = (1.0, 2.0, 4.0, 8.0, 15.0)

_PROBE = jupyter_scripts.PROBE


_FACTS = """
import json, sys
try:
    from importlib.metadata import version
    jl = version("jupyterlab")
except Exception:
    jl = None
print(json.dumps({"python": sys.version.split()[0], "jupyterlab": jl}))
sys.exit(0 if jl else 3)
"""


class SlurmEnvironments(FlowBackend):
    """The environments of one owner on one Slurm cluster, reached through its login node.

    `slurm` is a devenv.schedulers.slurm.Slurm and `files` a devenv.runtimes.host_runtime.HostRuntime, both on
    the login node's connection (passed in: this service never builds an adapter)."""

    traits = Traits("a Slurm job", down_verb="Cancelled")
    shell = Shell.NONE              # a job runs no sshd of its own
    early_preflight = True          # measured to gain: the login node's batch beside the job lookup
    sanity_across_nodes = True      # `devenv sanity CLUSTER` runs in a job, across its nodes

    @classmethod
    def run_check(cls, conn: Connection, host: HostProfile, env: EnvProfile,
                  on_result: Callable[[CheckResult], None] | None = None) -> CheckReport:
        """The cluster's check: the login node's (partitions, GRES, the request, limits) and a node's."""
        from devenv.services.environments.slurm import check

        return check.run_cluster_check(conn, host, env, on_result)

    @classmethod
    def run_preflight(cls, conn: Connection, host: HostProfile, env: EnvProfile,
                      allow_busy: bool = False) -> CheckReport:
        """The login node's part of the cluster check (partitions, GRES, the request, limits)."""
        from devenv.services.environments.slurm import check

        return check.run_cluster_preflight(conn, host, env)

    @classmethod
    def watched_places(cls, connect: Callable[[], Connection], host: HostProfile) -> list[JobPlace] | None:
        """The nodes of the user's running devenv jobs (one squeue on the login node)."""
        from devenv.services.environments.slurm.places import job_places

        return job_places(connect(), host)

    def __init__(self, host: HostProfile, conn: Connection, slurm: Slurm, files: HostRuntime,
                 owner: str | None = None,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                 check: Check | None = None):
        self.check = check            # the preflight; None: `up` checks nothing
        self.host = host
        self.conn = conn
        self.slurm = slurm
        self.files = files
        self.owner = owner or envspec.owner()
        self.settings: SlurmSettings = host.slurm or SlurmSettings()
        self._clock = clock
        self._sleep = sleep

    # --- names and specs ---------------------------------------------------------------------------------

    def key(self, env_name: str) -> str:
        return f"{self.owner}-{env_name}"

    def job_name(self, env_name: str) -> str:
        return slurm_job.job_name(self.owner, env_name)

    def spec(self, env: EnvProfile) -> dict[str, Any]:
        settings = self.settings.to_dict()
        settings.pop("queue_timeout")    # how long we wait is not part of what runs
        return {"env": env.name, "runtime": "slurm", "python": self.host.python,
                "port": env.ports.get("jupyter", envspec.CONTAINER_PORTS["jupyter"]), "jupyter": env.jupyter,
                "slurm": settings}

    # --- reading the cluster -----------------------------------------------------------------------------

    def job_of(self, env_name: str) -> Job | None:
        """The env's live job (newest), else its newest ended one Slurm still remembers, else None."""
        return max(self.slurm.jobs(self.job_name(env_name)), key=_rank, default=None)

    def job_state(self, env_name: str, job_id: str) -> dict[str, Any] | None:
        """job-<id>.json (node, port) the launcher wrote on the compute node; None before it ran."""
        result = self.conn.run(f"cat {self._env_path(env_name, f'job-{int(job_id)}.json')}", timeout=30)
        try:
            return json.loads(result.stdout) if result.ok else None
        except ValueError:
            return None

    def _status(self, env_name: str, job: Job, state: dict[str, Any] | None = None,
                spot: slurm_text.QueueSpot | None = None) -> EnvStatus:
        nodes = self.slurm.hostnames(job.nodes) if job.nodes else []
        if job.phase == "running":
            state = state if state is not None else self.job_state(env_name, job.job_id)
        running = job.phase == "running" and bool(state)
        queue: dict[str, Any] = {}
        if job.phase == "pending":
            spot = spot if spot is not None else self.slurm.queue_spot(job.job_id)
            detail = slurm_text.wait_text(job, spot, None, self.settings.queue_timeout)
            queue = {"reason": job.reason_code, "reason_text": job.reason_text(), **spot.to_dict(),
                     "limit_s": self.settings.queue_timeout, "estimated_start": job.start}
        elif job.phase == "running":
            detail = (f"time left {job.time_left}" if job.time_left else "") + ("" if state else
                                                                                 ", Jupyter not started yet")
        elif job.phase == "ending":
            detail = "ending (Slurm is cleaning up the job)"
        else:
            detail = f"ended: {job.end_text()}"
        if job.phase in LIVE and envstate.load(self.host.name, env_name).get("lost_job") == job.job_id:
            detail = (f"left by an `up` that lost its connection: `devenv down {self.host.name} --env {env_name}` "
                      f"cancels it; {detail}")
        spec_hash = (job.comment or "").removeprefix("devenv:") or None
        return EnvStatus(
            host=self.host.name, env=env_name, owner=self.owner, runtime="slurm",
            state="running" if running else ("starting" if job.phase == "running" else
                                             "pending" if job.phase == "pending" else
                                             "ending" if job.phase == "ending" else "ended"),
            spec_hash=spec_hash, ports={"jupyter": int(state["port"])} if running and state else {},
            container=job.job_id, name=job.name, started_at=job.start or "", detail=detail.strip(", "),
            job_id=job.job_id, nodes=nodes, address=nodes[0] if nodes else "", queue=queue,
        )

    def list_environments(self, all_owners: bool) -> list[EnvStatus]:
        """This owner's environment jobs (Slurm shows a user only their own jobs' details: --me)."""
        prefix = slurm_job.JOB_PREFIX + self.owner + "-"
        chosen: dict[str, Job] = {}   # one row per environment: Slurm also remembers its earlier jobs a while
        for job in self.slurm.jobs_by_prefix(prefix):
            env_name = job.name[len(prefix):]
            if env_name not in chosen or _rank(job) > _rank(chosen[env_name]):
                chosen[env_name] = job
        # a job cancelled on purpose (down, an interrupted up, scancel) leaves no environment to show; one that
        # ended by itself (TIMEOUT, NODE_FAIL, ...) is shown, with why
        return [self._status(env_name, job) for env_name, job in chosen.items()
                if job.phase in LIVE or not job.state.startswith("CANCELLED")]

    def find(self, env_name: str) -> EnvStatus | None:
        job = self.job_of(env_name)
        return self._status(env_name, job) if job else None

    def volumes(self, env_name: str) -> list[str]:
        return [self.files.workspace(env_name)]

    def workspace(self, env: EnvProfile) -> str:
        return self.files.workspace(env.name)

    # --- up ----------------------------------------------------------------------------------------------

    @classmethod
    def open(cls, host: HostProfile, conn: Connection, check: Check | None = None) -> SlurmEnvironments:
        """Slurm's own CLI and the bare-host runtime's files, both on the login node's connection."""
        from devenv.runtimes.host_runtime import HostRuntime
        from devenv.schedulers.slurm import Slurm

        return cls(host, conn, Slurm(conn, host.name), HostRuntime(conn, host), check=check)

    def close(self) -> None:
        self.files.close()

    def up(self, env: EnvProfile, key: EnvKey | None = None, *, events: Events | None = None,
           options: UpOptions | None = None) -> UpResult:
        """The env's Jupyter running in a job, answering on its node (key: unused, no sshd in the job)."""
        if not env.jupyter:
            raise DevenvError(f"environment '{env.name}' runs no Jupyter: on a Slurm cluster there is nothing "
                              f"to start", f"use `devenv sanity {self.host.name}` to run checks in a job")
        # The python check and the env's files are one round trip, run while devenv looks for the env's job and
        # while the preflight runs (its own batch): nothing in either depends on the others, and sbatch waits
        # for all. A valid token there is kept, so a job found running keeps the token its Jupyter has.
        env_key, fresh = self.key(env.name), jupyter.new_token()
        self._fresh_token = fresh
        self._prepared = Background(lambda: self.files.prepare_in_one(
            env_key, self.files.workspace(env.name), fresh, _FACTS,
            {"launch.py": slurm_job.LAUNCHER.encode(), "autostop_watcher.py": autostop.watcher_source()},
            self._need_jupyterlab), "devenv-slurm-prepare")
        try:
            return super().up(env, key, events=events, options=options)
        finally:   # on every way out: a failure's news is the failure, not what the files' round trip found
            self._prepared.wait()

    # --- up's steps (environments/flow.py decides) ---------------------------------------------------------

    def look(self, env: EnvProfile, key: EnvKey | None, options: UpOptions) -> Existing | None:
        """The env's live job (pending, running or ending), judged by the spec hash in its comment."""
        job = self.job_of(env.name)
        if job is None or job.phase not in LIVE:
            return None
        spec_hash = envspec.spec_hash(self.spec(env))
        same = (job.comment or "") == f"devenv:{spec_hash}"
        diff = [] if same else [f"spec hash: {(job.comment or '?').removeprefix('devenv:')[:12]} -> {spec_hash[:12]}"]
        return Existing(job, job.phase != "ending", same, diff)

    def reattach(self, env: EnvProfile, found: Existing, key: EnvKey | None, events: Events,
                 options: UpOptions) -> UpResult:
        """A pending or running job of this spec: waited for until its Jupyter answers."""
        job: Job = found.handle
        events.step(f"Found job {job.job_id} ({job.state.lower()}) for '{env.name}' on {self.host.name}")
        token = self._reattach_token(env.name, self._prepared, self._fresh_token)
        if envstate.load(self.host.name, env.name).get("lost_job") == job.job_id:
            # an earlier `up` submitted it and lost the connection: this one takes it over, cleanup included
            events.step(f"Job {job.job_id} was left in the queue when an earlier `up` lost its connection to "
                        f"{self.host.name}; waiting for it now (Ctrl-C cancels it)")
            return self._wait_submitted(env, job.job_id, events, options, "reattached", token)
        job = self._wait_start(env.name, job.job_id, events)
        spare = self._relay_ahead(env.name, job, options)
        state = self._wait_ready(env.name, job, events, options.ready_timeout, spare)
        return self._up_result(env.name, job, state, "reattached", token, spare)

    def finish(self, env: EnvProfile, found: Existing, key: EnvKey | None, events: Events,
               options: UpOptions) -> UpResult | None:
        """A job of this spec that is ending cannot be finished: cancelled (Slurm is only stopping it)."""
        self.remove(env, found, events)
        return None

    def replace_question(self, env: EnvProfile, found: Existing) -> tuple[str, DevenvError]:
        job: Job = found.handle
        question = (f"Job {job.job_id} for '{env.name}' on {self.host.name} runs with another spec. "
                    f"Cancel it and submit a new one?")
        refusal = NotConfirmed(f"job {job.job_id} for '{env.name}' differs from the profile and was left running",
                               f"run `devenv up {self.host.name} --env {env.name} --yes` to replace it (the "
                               "workspace is kept)")
        return question, refusal

    def remove(self, env: EnvProfile, found: Existing, events: Events) -> None:
        events.step(f"Cancelling job {found.handle.job_id}")
        self.slurm.cancel(found.handle.job_id)

    def create(self, env: EnvProfile, key: EnvKey | None, action: str, found: Existing | None, events: Events,
               options: UpOptions) -> UpResult:
        """The env's files (written beside the lookup and the preflight), sbatch, the wait for the start and for
        Jupyter; a job that never answers is cancelled (no orphan stays queued)."""
        files = self._prepared.result()
        events.step(f"Wrote the environment's files on {self.host.name} (token 0600, Jupyter config)")
        token = files.token
        self._home_dir = files.home
        env_key, spec = self.key(env.name), self.spec(env)
        env_dir, workspace = self._abs(self.files.env_dir(env_key)), self._abs(self.files.workspace(env.name))
        request = JobRequest(self.settings, self.job_name(env.name), envspec.spec_hash(spec), f"{env_dir}/job-%j.log",
                             workspace)
        script = slurm_job.batch_script(self.host.python, f"{env_dir}/launch.py", env_dir, workspace, spec["port"],
                                        self._abs(f"{autostop.ROOT}/{env_key}"))
        events.step(f"Submitting the job ({_describe(self.settings)})")
        job_id = self.slurm.submit(request, script)
        envstate.update(self.host.name, env.name, container=job_id, token=token, ports={})
        return self._wait_submitted(env, job_id, events, options, action, token)

    def _wait_submitted(self, env: EnvProfile, job_id: str, events: Events, options: UpOptions, action: str,
                        token: str) -> UpResult:
        """Wait for a job this `up` owns to start and for its Jupyter; on every way out it is cancelled, or, when
        the login node cannot be reached again to cancel it, remembered and named (no silent orphan)."""
        try:
            job = self._wait_start(env.name, job_id, events)
            spare = self._relay_ahead(env.name, job, options)
            state = self._wait_ready(env.name, job, events, options.ready_timeout, spare)
        except ConnectError as lost:   # the login node is gone: the job can only be cancelled from there
            raise self._lost_connection(env.name, job_id, lost, events) from lost
        except BaseException as exc:   # Jupyter never answered, Ctrl-C, SIGTERM: leave no orphan job
            self._cancel_quietly(job_id)
            if isinstance(exc, KeyboardInterrupt):   # Ctrl-C, SIGTERM, SIGHUP: what became of the job is said
                events.step(f"Interrupted: devenv cancelled job {job_id}")
            if isinstance(exc, jupyter.NotReady):
                exc.hint = f"devenv cancelled job {job_id}; " + (exc.hint or "")
            raise
        result = self._up_result(env.name, job, state, action, token, spare)
        envstate.update(self.host.name, env.name, container=job_id, token=token, ports=result.status.ports,
                        lost_job=None)
        return result

    def _lost_connection(self, env_name: str, job_id: str, lost: ConnectError, events: Events) -> ConnectError:
        """The connection to the login node died while `up` waited for job_id. Said at once; the login node is
        dialled again after each of RECONNECT_PAUSES_S to cancel the job (what any other way out of the wait
        does). When it does not answer, the job is remembered on this laptop, so that `status`, `up` and `down`
        name it, and the error says how to end it. Either way `up` failed on the connection: exit 3."""
        host, again = self.host.name, f"--env {env_name}"
        envstate.update(host, env_name, lost_job=job_id)   # first: a Ctrl-C in the retries leaves it named
        events.step(f"Lost the connection to {host} while `up` waited for job {job_id} ({lost.message}); "
                    f"reconnecting to cancel the job (for at most {sum(RECONNECT_PAUSES_S):.0f} s)")
        for pause in RECONNECT_PAUSES_S:
            self._sleep(pause)
            try:
                job = self.slurm.job(job_id)
                if job is not None and job.phase in LIVE:
                    self.slurm.cancel(job_id)
            except ConnectError:
                continue
            envstate.update(host, env_name, lost_job=None)
            events.step(f"Reconnected to {host}: devenv cancelled job {job_id}")
            return ConnectError(f"the connection to {host} was lost while `up` waited for job {job_id}; devenv "
                                f"reconnected and cancelled the job", f"`devenv up {host} {again}` submits a new "
                                f"one when the connection is steady (the workspace is kept)")
        return ConnectError(f"the connection to {host} was lost while `up` waited for job {job_id}, and {host} did "
                            f"not answer again within {sum(RECONNECT_PAUSES_S):.0f} s: job {job_id} may still be "
                            f"queued, and would hold a node once it starts",
                            f"when {host} answers, `devenv down {host} {again}` cancels it (or `scancel {job_id}` "
                            f"on the login node); `devenv status {host}` shows it, `devenv up {host} {again}` "
                            f"waits for it")

    def _up_result(self, env_name: str, job: Job, state: dict[str, Any], action: str, token: str,
                   spare: Spare | None = None) -> UpResult:
        access = self._access(env_name, job, state, token, spare)
        return UpResult(access.status, action, token, None, jupyter=access)

    def _access(self, env_name: str, job: Job, state: dict[str, Any], token: str,
                spare: Spare | None = None) -> JupyterAccess:
        """Jupyter on the node's loopback, reached by the login node's relay through the job (srun --overlap)."""
        port = int(state["port"])
        return JupyterAccess(self._status(env_name, job, state), token, port,
                             relay=self.relay_command(job.job_id, state["node"], port),
                             ended=lambda: self.ended_reason(env_name, job.job_id), spare=spare)

    def _relay_ahead(self, env_name: str, job: Job, options: UpOptions) -> Spare | None:
        """The tunnel's first relay, started as the job runs (when the caller opens a tunnel right after `up`):
        srun and the relay's start overlap Jupyter's own start instead of following it, so the URL `up` prints
        answers at once. It connects to the port the launcher records once Jupyter listens there."""
        nodes = self.slurm.hostnames(job.nodes) if job.nodes else []
        if not (options.relay_ahead and nodes and hasattr(self, "_home_dir")):
            return None   # (a reattach that read no $HOME: the tunnel starts its own, as before)
        from devenv.remote.relay import start_spare

        state_file = f"{self._abs(self.files.env_dir(self.key(env_name)))}/job-{int(job.job_id)}.json"
        command = slurm_job.early_relay_command(job.job_id, nodes[0], self.host.python, state_file,
                                                options.ready_timeout + 30)
        return start_spare(self.conn, command)

    def _need_jupyterlab(self, facts: dict[str, Any]) -> None:
        if not facts.get("jupyterlab"):
            raise DevenvError(f"{self.host.python} on {self.host.name} (python {facts.get('python')}) has no "
                              f"JupyterLab", f"install it where the compute nodes see it (a venv on the shared "
                                             f"file system): {self.host.python} -m pip install jupyterlab")

    def _wait_start(self, env_name: str, job_id: str, events: Events) -> Job:
        """Until the job runs; bounded by slurm.queue_timeout, cancelling it on timeout or a hopeless reason.
        While it pends, a line every REPORT_EVERY_S (and when the reason changes): Slurm's reason, how long it
        has waited, the limit, its place in the partition's queue; the first one once Slurm gave a reason
        (a job it has not looked at yet has none), or after FIRST_REPORT_S without one."""
        started = self._clock()
        deadline = started + self.settings.queue_timeout
        said_reason: str | None = None
        next_report = started + FIRST_REPORT_S
        polls = 0
        while True:
            job = self.slurm.job(job_id)
            if job is None:
                raise JobEnded(f"job {job_id} for '{env_name}' on {self.host.name} is gone (Slurm no longer "
                               f"knows it)", f"run `devenv up {self.host.name}` again")
            if job.phase == "running":
                return job
            if job.phase in ("ended", "ending"):
                raise self._ended(env_name, job)
            hopeless = job.hopeless
            if hopeless:
                self.slurm.cancel(job_id)
                raise JobRejected(f"job {job_id} can never start on {self.host.name}: {job.reason} ({hopeless}); "
                                  f"devenv cancelled it",
                                  f"fix the host profile's slurm: settings; `devenv check {self.host.name}` "
                                  f"shows the partitions and their limits")
            now = self._clock()
            timed_out = now >= deadline
            changed = job.reason_code is not None and job.reason_code != said_reason
            if changed or now >= next_report or timed_out:
                spot = self.slurm.queue_spot(job_id)
                text = slurm_text.wait_text(job, spot, now - started, self.settings.queue_timeout)
                if not timed_out:
                    events.step(f"Job {job_id} {text}")
                said_reason = job.reason_code or said_reason
                next_report = now + REPORT_EVERY_S
            if timed_out:
                self.slurm.cancel(job_id)
                raise QueueTimeout(f"job {job_id} did not start within {self.settings.queue_timeout:.0f} s on "
                                   f"{self.host.name}: {text}; devenv cancelled it",
                                   "raise slurm.queue_timeout in the host profile, or ask for fewer resources "
                                   "or another partition; `devenv check " + self.host.name + "` shows the "
                                   "nodes and what they take")
            polls += 1
            self._sleep(0.25 if polls < 20 else 1.0)   # 5 s of quick polls: a free queue starts a job in 1-4 s

    def _wait_ready(self, env_name: str, job: Job, events: Events, timeout: float,
                    spare: Spare | None = None) -> dict[str, Any]:
        """Until Jupyter answers on the job's node (probed with srun --overlap); its job-<id>.json. A relay
        started ahead (spare) is closed when the wait fails."""
        try:
            return self._wait_answering(env_name, job, events, timeout)
        except BaseException:
            if spare is not None:
                spare.discard()
            raise

    def _wait_answering(self, env_name: str, job: Job, events: Events, timeout: float) -> dict[str, Any]:
        nodes = self.slurm.hostnames(job.nodes) if job.nodes else []
        events.step(f"Job {job.job_id} running on {', '.join(nodes) or '?'}; waiting for Jupyter "
                    f"(at most {timeout:.0f} s)")
        found: dict[str, Any] = {}
        deadline = self._clock() + timeout
        batch_node = nodes[0] if nodes else ""

        def probe() -> jupyter.Probe:
            if found.get("asked"):    # the first probe comes right after squeue said RUNNING
                current = self.slurm.job(job.job_id)
                if current is None or current.phase != "running":
                    return jupyter.Probe(False, "", stopped=self._ended(env_name, current or job).message)
            found["asked"] = True
            wait_s = max(0.5, min(10.0, deadline - self._clock()))
            said, state, result = self._ready_on_node(env_name, job.job_id, batch_node, wait_s)
            if state:
                found["state"] = state
            return jupyter.Probe(result.ok, said)

        jupyter.wait_ready(probe, lambda: self.job_log(env_name, job.job_id, 30), host=self.host.name,
                           timeout=timeout, on_wait=getattr(events, "waiting", None))
        state: dict[str, Any] = found["state"]
        return state

    def _ended(self, env_name: str, job: Job) -> JobEnded:
        log = self.job_log(env_name, job.job_id, 15)
        message = f"job {job.job_id} for '{env_name}' on {self.host.name} ended: {job.end_text()}"
        if log:
            message += "\nlast lines of its log:\n" + "\n".join(f"  | {line}" for line in log)
        up = f"`devenv up {self.host.name}`"
        hint = {"TIMEOUT": f"raise slurm.time in the host profile; {up} starts a new job (the workspace is kept)",
                "NODE_FAIL": f"the node failed; {up} starts a new job on a healthy node",
                "PREEMPTED": f"a higher-priority job took the node; {up} queues a new job"}
        return JobEnded(message, hint.get(job.outcome, f"`devenv up {self.host.name}` starts a new job"))

    def _ready_on_node(self, env_name: str, job_id: str, node: str,
                       wait_s: float) -> tuple[str, dict[str, Any] | None, Result]:
        """One round trip: wait up to wait_s on the login node for Jupyter's "is running at" line in the job's
        log (a grep every 0.1 s; squeue once a second ends the wait when the job stops running), read the
        launcher's job-<id>.json (node, port), then probe that port on the node (srun --overlap). Jupyter runs
        with port_retries 0, so the line means it listens on the port the launcher recorded.
        (what to say, the job's state if written, the result: ok when Jupyter answered)."""
        log = self._env_path(env_name, f"job-{int(job_id)}.log")
        state_file = self._env_path(env_name, f"job-{int(job_id)}.json")
        polls = int(wait_s * 10)
        step = slurm_job.step_command(job_id, node, [self.host.python, "-c", _PROBE])
        script = (f"i=0; while ! grep -q 'is running at' {log} 2>/dev/null; do [ $i -ge {polls} ] && exit 10; "
                  f"i=$((i+1)); if [ $((i % 10)) -eq 0 ]; then squeue -h -j {int(job_id)} -o %T 2>/dev/null | "
                  f"grep -q RUNNING || exit 10; fi; sleep 0.1; done\n"
                  f"cat {state_file} 2>/dev/null || exit 11; echo\n"
                  f"port=$(sed -n 's/.*\"port\": *\\([0-9][0-9]*\\).*/\\1/p' {state_file}); "
                  f'[ -n "$port" ] || exit 11\n'
                  f'{step} "$port"')
        result = self.conn.run(script, timeout=wait_s + 60)
        if result.exit_code == 10:
            return "jupyter down: starting (its log does not say it runs yet)", None, result
        first, _, rest = result.stdout.partition("\n")
        try:
            state = json.loads(first) if result.exit_code != 11 else None
        except ValueError:
            state = None
        if not state:
            return "jupyter down: the job has not started Jupyter yet", None, result
        return (rest + result.stderr).strip(), state, result

    def job_log(self, env_name: str, job_id: str, tail: int = 30) -> list[str]:
        path = self._env_path(env_name, f"job-{int(job_id)}.log")
        result = self.conn.run(f"tail -n {int(tail)} {path}", timeout=30)
        return result.stdout.splitlines() if result.ok else []

    def ended_reason(self, env_name: str, job_id: str) -> str | None:
        """None while the job runs; else what ended it (the tunnel's watcher asks this)."""
        job = self.slurm.job(job_id)
        if job is not None and job.phase == "running":
            return None
        return self._ended(env_name, job).message if job else f"job {job_id} is gone (Slurm no longer knows it)"

    # --- the rest of the lifecycle -----------------------------------------------------------------------

    def take_down(self, env_name: str, purge: bool) -> Removed:
        removed = Removed(self.traits.down_verb)
        for job in self.slurm.jobs(self.job_name(env_name)):
            if job.phase in LIVE:
                self.slurm.cancel(job.job_id)
                removed.items.append(f"job {job.job_id}")
        if purge:
            removed.volumes.extend(self.files.remove(self.key(env_name), env_name, True)[1:])
        return removed

    def _cancel_quietly(self, job_id: str) -> None:
        """scancel a job this call submitted, unless Slurm has already ended it; never raises (best effort)."""
        try:
            job = self.slurm.job(job_id)
            if job is not None and job.phase in LIVE:
                self.slurm.cancel(job_id)
        except Exception:  # noqa: BLE001 (cleaning up on the way out of another error: that error is the news)
            pass

    def _reattach_token(self, env_name: str, prepared: Background[PreparedFiles], fresh: str) -> str:
        """The running Jupyter's token: the one devenv keeps, else the one the files' round trip found there. One
        that round trip had to write anew (there was none) is not that Jupyter's: that is the error _token
        gives, as before the files were written beside the job lookup."""
        cached = envstate.load(self.host.name, env_name).get("token")
        if cached:
            prepared.wait()
            return str(cached)
        try:
            files = prepared.result()
        except DevenvError:       # the python check failed, nothing was written: the token file says
            return self._token(env_name)
        if files.token == fresh:
            raise self._no_token(env_name)
        return files.token

    def _token(self, env_name: str) -> str:
        cached = envstate.load(self.host.name, env_name).get("token")
        token = cached or self.files.read_token(self.key(env_name))
        if not token:
            raise self._no_token(env_name)
        return token

    def _no_token(self, env_name: str) -> DevenvError:
        return DevenvError(f"no Jupyter token for '{env_name}' on {self.host.name}",
                           f"restart it: `devenv down {self.host.name}` then `devenv up {self.host.name}`")

    def running(self, env_name: str) -> tuple[EnvStatus, Job, dict[str, Any]]:
        job = self.job_of(env_name)
        if job is None:
            raise DevenvError(f"no environment '{env_name}' on {self.host.name}",
                              f"start it with `devenv up {self.host.name}`")
        if job.phase != "running":
            if job.phase in ("ended", "ending"):    # ending: over, Slurm is only stopping its processes
                raise self._ended(env_name, job)
            raise DevenvError(f"job {job.job_id} for '{env_name}' on {self.host.name} is {job.state.lower()}",
                              f"wait for it: `devenv up {self.host.name}` shows why it waits")
        state = self.job_state(env_name, job.job_id)
        if not state:
            raise DevenvError(f"job {job.job_id} runs but has not started Jupyter yet",
                              f"`devenv up {self.host.name}` waits for it; `devenv logs {self.host.name}` shows "
                              "its log")
        return self._status(env_name, job, state), job, state

    def jupyter_access(self, env_name: str) -> JupyterAccess:
        """The token, and the port on the node's loopback with the login node's relay command to it."""
        _, job, state = self.running(env_name)
        return self._access(env_name, job, state, self._token(env_name))

    def ssh_target(self, env_name: str) -> SshTarget:
        raise DevenvError(f"environments on {self.host.name} are Slurm jobs, which run no sshd of their own",
                          f"`devenv exec {self.host.name} -- CMD` runs a command on the job's node; "
                          f"`devenv jupyter {self.host.name}` opens its Jupyter")

    def command_target(self, env_name: str, host_if_no_env: bool = False) -> CommandTarget:
        return CommandTarget(self.conn, self.host.python, f"login node, python {self.host.python}", self.conn)

    def jupyter_relay(self, env_name: str) -> tuple[EnvStatus, str, Callable[[], str], Callable[[], str | None]]:
        """What a tunnel to the env's Jupyter needs: (status, token, the login node's relay command, a watcher
        saying why the job ended, else None). The caller's CommandTunnel runs the command per connection."""
        status, job, state = self.running(env_name)
        command = self.relay_command(job.job_id, state["node"], int(state["port"]))
        return status, self._token(env_name), lambda: command, lambda: self.ended_reason(env_name, job.job_id)

    def relay_command(self, job_id: str, node: str, port: int) -> str:
        """The login node's command whose stdin/stdout is 127.0.0.1:port on the node (srun --overlap relay)."""
        return slurm_job.relay_command(job_id, node, self.host.python, port)

    def logs(self, env_name: str, tail: int | str = 200, follow: bool = False) -> Iterator[str]:
        job = self.job_of(env_name)
        if job is None:
            raise DevenvError(f"no environment '{env_name}' on {self.host.name}",
                              f"start it: devenv up {self.host.name}")
        path = self._env_path(env_name, f"job-{int(job.job_id)}.log")
        count = "+1" if tail == "all" else str(int(tail))
        if follow:
            return self.conn.stream(f"tail -n {count} -F {path}")
        return iter(self.conn.run(f"tail -n {count} {path}", timeout=60).stdout.splitlines())

    def run_place(self, env: EnvProfile) -> RunPlace:
        """A run is a step of the environment's job on its first node (srun --overlap), started on the login
        node with setsid + nohup, so that srun outlives the connection; its folder is in the workspace, on the
        file system the login node and the nodes share. The step's state is read on the node (where its pids
        are). `--then stop|down` ends the job (scancel), which frees the allocation; the workspace stays."""
        from devenv.env.runs import RUNS_FOLDER

        _, job, state = self.running(env.name)
        workspace = self._abs(self.files.workspace(env.name))
        wrap = slurm_job.run_step_words(job.job_id, state["node"], workspace)

        def launch(text: str, args: list[str]) -> tuple[int, str, str]:
            words = ["sh", "-c", text, "devenv", *args]
            result = self.conn.run(f"mkdir -p {shlex.quote(workspace)} && cd {shlex.quote(workspace)} && "
                                   + " ".join(shlex.quote(w) for w in words), timeout=60)
            return result.exit_code, result.stdout, result.stderr

        end = ["scancel", job.job_id]
        return RunPlace(f"{workspace}/{RUNS_FOLDER}", exec_script(self, env.name), launch, wrap=wrap,
                        then={"stop": end, "down": end})

    def exec(self, env_name: str, argv: list[str]) -> ExecStream:
        """argv on the job's first node, in the workspace (srun --overlap), its output streamed as it comes, with
        no time limit of devenv's (the job's own applies), and its exit code."""
        return stream_output(self.conn, self.exec_command(env_name, argv))

    def exec_entry(self, env: EnvProfile, argv: list[str], tty: bool = False) -> ExecEntry:
        """The same command, run by the user's ssh to the login node: srun passes stdin (and a terminal) on."""
        return ExecEntry(self.exec_command(env.name, argv, tty), on_host=True)

    def exec_command(self, env_name: str, argv: list[str], tty: bool = False) -> str:
        """The login node's command that runs argv in the env's job (stdin, a terminal when tty, the command's
        exit code)."""
        _, job, state = self.running(env_name)
        return slurm_job.exec_command(job.job_id, state["node"], self.host.python,
                                      self._abs(self.files.workspace(env_name)), argv, tty)

    autostops = True

    def autostop_plan(self, env: EnvProfile, result: UpResult) -> autostop.AutostopPlan:
        """The watcher runs in the job, on its first node beside Jupyter: the job's launcher starts it and it
        waits there until this writes its config (naming the job) on the shared file system. Sessions are the
        job's `srun --overlap` steps (devenv exec), not its relays to Jupyter; its GPUs are the job's. Stop and
        down both end the job (its Jupyter, the batch step, ends; else scancel): the allocation is freed, the
        workspace stays, and the next `up` submits a new job."""
        from devenv.env.runs import RUNS_FOLDER

        job_id = result.status.job_id or result.status.container
        if not job_id or not job_id.split("_")[0].isdigit():
            raise DevenvError(f"no job for '{env.name}' to watch", "run `devenv up` again")
        workspace = self._abs(self.files.workspace(env.name))
        env_dir = self._abs(self.files.env_dir(self.key(env.name)))
        end = [{"end_job": 30}]
        port = result.jupyter.port if result.jupyter is not None else result.status.ports.get("jupyter")
        return autostop.AutostopPlan(
            key=self.key(env.name), python=self.host.python, sessions={"kind": "job"},
            gpus="job" if self.settings.gpus_per_node else "none", runs_dir=f"{workspace}/{RUNS_FOLDER}",
            stop_steps=end, down_steps=end, hook_prefix=[], hook_cwd=workspace, jupyter_port=port,
            token_file=f"{env_dir}/jupyter_token", job_id=job_id, in_environment=True, ends_itself=True)

    def autostop_states(self) -> dict[str, dict[str, Any]]:
        """The watchers' states on the shared file system; one in a job lives while its job runs (status shows
        "not watching" once the job ended by other means)."""
        states = super().autostop_states()
        for state in states.values():
            if state.get("job_id"):
                state["watcher_alive"] = True
        return states

    def _env_path(self, env_name: str, name: str) -> str:
        """A file in the env's dir, absolute and quoted for the login node's shell."""
        return shlex.quote(f"{self._abs(self.files.env_dir(self.key(env_name)))}/{name}")

    def _abs(self, path: str) -> str:
        if not path.startswith("~/"):
            return path
        if not hasattr(self, "_home_dir"):
            self._home_dir = self.conn.run('printf %s "$HOME"', check=True, timeout=30).stdout.strip()
        return self._home_dir + path[1:]


def _rank(job: Job) -> tuple[bool, int]:
    """Which of an environment's jobs is the environment: a live one before an ended one, then the newest."""
    return job.phase in LIVE, int(job.job_id.split("_")[0])


def _describe(s: SlurmSettings) -> str:
    parts = [f"partition {s.partition}" if s.partition else "default partition", f"{s.nodes} node(s)",
             f"time {s.time}"]
    if s.gpus_per_node:
        parts.append(f"{s.gpus_per_node} GPU(s)/node" + (f" ({s.gpu_type})" if s.gpu_type else ""))
    if s.account:
        parts.append(f"account {s.account}")
    if s.qos:
        parts.append(f"qos {s.qos}")
    return ", ".join(parts)
