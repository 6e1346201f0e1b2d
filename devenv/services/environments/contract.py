"""The one interface every kind of environment implements (L2), and what passes through it.

An EnvironmentBackend is the environments of one owner on one host, wherever they live: a container
(environments/docker), the bare host (environments/host) or a Slurm job (environments/slurm).
environments.registry is the only code that knows which is which; callers (services.session, and through it the
CLI and the TUI) ask the backend's class and its instances, never the runtime's name: what the check is, where
`devenv ssh` lands, whether images are built, what the monitor watches, what `down` did. `up`, `down` and
`status` decide once, in environments/flow.py; each backend supplies the steps (look, reattach, finish, remove,
create, stop, list).

Progress and questions go up through Events, which the front end implements: a backend never prints.
"""

from __future__ import annotations

import shlex
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, cast

from devenv.checks.report import CheckReport
from devenv.config.autostop import Autostop
from devenv.config.profiles import EnvProfile, HostProfile
from devenv.env.image_context import BuildInputs
from devenv.env.info import EnvStatus, ImageInfo, ProgressEvent
from devenv.errors import DevenvError
from devenv.services import jupyter

if TYPE_CHECKING:
    from devenv.checks.report import CheckResult
    from devenv.remote.base import Connection
    from devenv.remote.envkey import EnvKey
    from devenv.services.environments.autostop import AutostopPlan
    from devenv.services.monitor import JobPlace

# chunks of (stdout, stderr) bytes, and a function giving the exit code once they are read
ExecStream = tuple[Iterator[tuple[bytes, bytes]], Callable[[], int]]
# the preflight of `up`: every check of `devenv check` for this host and an environment
Check = Callable[[EnvProfile], CheckReport]


class Events(Protocol):
    """What a session tells its front end while it works, and the one question it may ask."""

    def step(self, text: str) -> None: ...

    def progress(self, event: ProgressEvent) -> None: ...

    def waiting(self, waited: float, probe: jupyter.Probe) -> None: ...

    def checked(self, report: CheckReport) -> None:
        """The preflight's report, before `up` goes on (or stops, when it failed)."""

    def confirm(self, question: str, details: list[str]) -> bool: ...


class QuietEvents:
    """Events that show nothing and refuse to recreate: for callers without a person to ask."""

    def step(self, text: str) -> None: ...

    def progress(self, event: ProgressEvent) -> None: ...

    def waiting(self, waited: float, probe: jupyter.Probe) -> None: ...

    def checked(self, report: CheckReport) -> None: ...

    def confirm(self, question: str, details: list[str]) -> bool:
        return False


@dataclass(frozen=True)
class Traits:
    """Words that present a kind of backend to people (no behaviour hides behind these: behaviour is asked of
    the backend's class and its instances)."""

    environment: str        # what one environment is there: "a container", "Jupyter on the host", "a Slurm job"
    down_verb: str          # what `down` did to each item it lists: "Removed container", "Stopped", ...


class Shell(Enum):
    """Where `devenv ssh` lands, and with it `code` and `sync` (`exec` asks the backend: exec, exec_entry)."""

    OWN_SSHD = "own sshd"   # the environment's own sshd, published on the host's 127.0.0.1 (devenv's ssh entry)
    HOST = "host"           # the host's own sshd: the environment is the host itself
    NONE = "none"           # no shell (a Slurm job): commands run through the login node (exec, exec_entry)


@dataclass(frozen=True)
class Removed:
    """What `down` did: each item (a container, a Jupyter process, a job) with the verb that says what was done
    to it, the workspace deleted by --purge and the networks removed."""

    verb: str
    items: list[str] = field(default_factory=list)
    volumes: list[str] = field(default_factory=list)
    networks: list[str] = field(default_factory=list)

    @property
    def nothing(self) -> bool:
        return not self.items and not self.volumes and not self.networks

    def to_json(self) -> dict[str, Any]:
        """`down --json`: the same keys for every backend (items under "removed", said by "verb")."""
        return {"verb": self.verb, "removed": self.items, "volumes": self.volumes, "networks": self.networks}


@dataclass(frozen=True)
class Existing:
    """What `up` found of the environment on the host, for environments/flow.py to decide on. `handle` is the
    backend's own (a container, a state file, a job); the flow only reads the rest."""

    handle: Any
    running: bool               # it runs (or a job waits in the queue): reattach when its spec is the same
    same: bool                  # made from the profile's spec as it is now
    diff: list[str] = field(default_factory=list)   # what changed, when not the same (shown before the question)


@dataclass
class UpOptions:
    build_inputs: BuildInputs = field(default_factory=BuildInputs)
    ready_timeout: float = jupyter.READY_TIMEOUT
    assume_yes: bool = False          # recreate a changed environment without asking
    allow_busy: bool = False          # gpus: N may take busy GPUs when too few are free; the check allows them
    # gpus: N (free:N) -> the host GPUs to give ("1,3"), picked when the container is made (services.gpu_occupancy)
    pick_gpus: Callable[[int], str] | None = None
    # the caller opens a tunnel to Jupyter as soon as `up` returns (the CLI's held `up`): a backend reached
    # through a relay command may start the tunnel's first relay while it waits for Jupyter (JupyterAccess.spare)
    relay_ahead: bool = False
    # `up --autostop 90m` (else the env profile's, else the host profile's `autostop:`); --no-autostop disarms
    autostop: Autostop | None = None
    no_autostop: bool = False


@dataclass
class UpResult:
    status: EnvStatus
    action: str                       # created | reattached | recreated | started
    token: str | None
    host_key: str | None              # the environment's sshd host key ("ssh-ed25519 AAAA...")
    image_action: str = "present"     # present | built | pulled
    elapsed_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    jupyter: JupyterAccess | None = None   # set by a backend whose Jupyter is not on the host's 127.0.0.1


@dataclass(frozen=True)
class JupyterAccess:
    """Where a running environment's Jupyter is, seen from the host devenv connects to."""

    status: EnvStatus
    token: str
    port: int                         # on the host's 127.0.0.1 (or, with relay, on the node's)
    relay: str | None = None          # a command on the host whose stdin/stdout is that port (a Slurm node's)
    ended: Callable[[], str | None] | None = None   # why what the relay reaches is gone, None while it runs
    spare: Any = None                 # a relay already started (remote.relay.Spare), for the tunnel's first client


@dataclass(frozen=True)
class SshTarget:
    """Where `devenv ssh` goes: the environment's sshd on the host's 127.0.0.1:port, or the host itself."""

    port: int | None = None
    host_key: str | None = None
    user: str = "root"               # who the environment's sshd admits (its own user, else root)

    @property
    def on_host(self) -> bool:
        return self.port is None


@dataclass(frozen=True)
class ExecEntry:
    """How `devenv exec` runs a command with the user's stdin (and a terminal) through the user's OpenSSH:
    `command`, a line for a shell there, whose exit code is the command's. on_host: the host's shell (the host's
    ssh; this machine's own shell for a local host), where the backend's command reaches the environment (the
    host itself, a job through srun); else the environment's own sshd, reached through its ssh entry."""

    command: str
    on_host: bool


def in_folder(folder: str, argv: list[str]) -> str:
    """A shell line running argv word for word (each word quoted) in folder, or where the shell starts when
    folder is gone; folder "~/x" is under the shell's $HOME."""
    place = '"$HOME"/' + shlex.quote(folder[2:]) if folder.startswith("~/") else shlex.quote(folder)
    return f"cd {place} 2>/dev/null; exec " + " ".join(shlex.quote(a) for a in argv)


def stream_output(conn: Connection, command: str) -> ExecStream:
    """command run on conn with no time limit, its output passed on as it comes (one chunk at the end where the
    connection cannot stream: this machine's)."""
    stream = getattr(conn, "output_stream", None)
    if stream is not None:
        return cast(ExecStream, stream(command))
    result = conn.run(command, timeout=float(10**9))
    return iter([(result.stdout.encode(), result.stderr.encode())]), (lambda: result.exit_code)


@dataclass(frozen=True)
class CommandTarget:
    """Where a program runs with the environment's python (the sanity runner), with the GPU host's own
    connection kept, so the run's GPUs can be watched from the host (services.gpu_occupancy)."""

    conn: Connection                  # where the program runs
    python: str                       # its default interpreter
    where: str                        # for people: "environment 'cuda'", "host python python3"
    host_conn: Connection             # the GPU host itself
    container: str | None = None      # the environment's container id, when it runs in one
    among: list[int] | None = None    # the host GPUs the environment has (None: all, or unknown)


class PreflightFailed(DevenvError):
    """`up`'s check failed: nothing was made (or submitted). Exit 1, or the report's fail_code (2 when the
    request itself cannot be met)."""

    def __init__(self, report: CheckReport):
        failed = report.failed
        names = ", ".join(c.title for c in failed)
        message = f"{report.host} is not ready for '{report.env}': {names}"
        hint = "fix the failed checks above (each shows its remedy), then run `devenv up` again"
        if len(failed) == 1:   # one cause: what was seen and its own remedy, so the error's lines say it all
            message += f" ({failed[0].value})"
            hint = failed[0].remedy or hint
        super().__init__(message, hint)
        self.report = report
        self.exit_code = report.fail_code


@dataclass(frozen=True)
class PrunedImage:
    """One devenv image `image prune` looked at: what it did with it and why."""

    id: str
    tags: tuple[str, ...]
    size_bytes: int
    env: str                          # the environment it was built for (its org.devenv.env label)
    action: str                       # removed | remove (a dry run) | kept
    reason: str                       # why kept, or why it goes

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id[:19], "tags": list(self.tags), "size_bytes": self.size_bytes, "env": self.env,
                "action": self.action, "reason": self.reason}


@dataclass
class ImagePrune:
    """What `image prune` found of devenv's images on a host (never another tool's: only images devenv built)."""

    dry_run: bool
    images: list[PrunedImage] = field(default_factory=list)

    @property
    def freed_bytes(self) -> int:
        """At most this much: images that share layers with a kept one free less."""
        return sum(i.size_bytes for i in self.images if i.action in ("removed", "remove"))


def no_images(host: HostProfile, verb: str = "build") -> DevenvError:
    """The error of `image build` (`image prune`) on a host whose environments are no containers."""
    return DevenvError(f"{host.name} uses runtime '{host.runtime}': there is no image to {verb}",
                       f"image {verb} is for hosts with `runtime: docker`")


@dataclass(frozen=True)
class RunPlace:
    """Where an environment's detached runs live and how they are reached (services/runs.py drives them with
    devenv.env.runs' scripts): the backend supplies the place, the scripts are the same everywhere."""

    runs_dir: str                                          # absolute, or ~/... on the host
    # sh -c SCRIPT devenv ARGS where the runs' processes are (in the container, on the host, on the job's node):
    # (exit code, stdout, stderr)
    script: Callable[[str, list[str]], tuple[int, str, str]]
    # the same for the launcher, which starts the supervisor detached from the connection
    launch: Callable[[str, list[str]], tuple[int, str, str]]
    wrap: list[str] = field(default_factory=list)          # what the supervisor runs under (a job step's srun)
    # what the supervisor runs when the command ended, for `--then stop|down` (absent: not offered here; []: the
    # backend's watch_end does it from outside, e.g. a container, which cannot stop or remove itself)
    then: dict[str, list[str]] = field(default_factory=dict)
    # watch_end(run folder, action): started once the run is, beside it, to do the action when the folder gets
    # its exit file
    watch_end: Callable[[str, str], None] | None = None


def runs_unsupported(host: HostProfile) -> DevenvError:
    """The error of `devenv run` (and runs, logs --run, cancel) on a backend that has no detached runs yet."""
    from devenv.errors import BadInput

    return BadInput(f"detached runs are not supported on this backend yet ({host.name}: runtime "
                    f"'{host.runtime}')", "use `devenv exec` there, or a host with runtime docker or host")


def exec_script(backend: EnvironmentBackend, env_name: str) -> Callable[[str, list[str]], tuple[int, str, str]]:
    """RunPlace.script through the backend's own exec: the script runs where `devenv exec` runs."""
    def script(text: str, args: list[str]) -> tuple[int, str, str]:
        return exec_output(backend.exec(env_name, ["sh", "-c", text, "devenv", *args]))
    return script


def exec_output(stream: ExecStream) -> tuple[int, str, str]:
    """An ExecStream read to its end: (exit code, stdout, stderr)."""
    chunks, exit_code = stream
    out, err = bytearray(), bytearray()
    for o, e in chunks:
        out += o or b""
        err += e or b""
    return exit_code(), out.decode(errors="replace"), err.decode(errors="replace")


def pick_free_gpus(ask: str, options: UpOptions, events: Events) -> str | None:
    """For `gpus: N` (free:N): the indices picked now by options.pick_gpus ("1,3"), said as a step; None for any
    other ask (all, none, named indices), which is taken as written."""
    from devenv.gpu import choose as gpu_choose

    count = gpu_choose.count_of(ask)
    if count is None:
        return None
    if options.pick_gpus is None:
        raise DevenvError(f"the environment asks for {count} free GPU(s), and nothing here can pick them",
                          "name the GPUs in the profile (gpus: [0, 1]) or use `devenv up`")
    chosen = options.pick_gpus(count)
    events.step(f"Picked GPU {chosen} ({gpu_choose.describe_ask(ask)})")
    return chosen


def preflight(check: Check | None, host: HostProfile, env: EnvProfile, events: Events) -> None:
    """The check before `up` makes anything: reported through events; a failed one stops `up`."""
    if check is None:
        return
    events.step(f"Checking {host.name}")
    report = check(env)
    events.checked(report)
    if not report.ok:
        raise PreflightFailed(report)


class EnvironmentBackend(ABC):
    """The environments of one owner on one host. Names are environment names (env profiles' names).

    The class answers what is known before anything is opened (the registry holds classes): its words, where
    the shell is, whether images are built, the checks, what the monitor watches. An instance (open()) is the
    host's environments. A backend subclasses environments/flow.FlowBackend, whose `up`, `down` and `status`
    decide once for all, and supplies the steps below."""

    traits: ClassVar[Traits]
    shell: ClassVar[Shell]
    builds_images: ClassVar[bool] = False       # environments run from an image built on the host (`image build`)
    needs_env_key: ClassVar[bool] = False       # `up` gives the environment devenv's key (its own sshd admits it)
    # `up` with no environment known on this laptop starts its preflight beside the engine's lookup (measured to
    # gain where the lookup is slow: a container engine, a login node's squeue)
    early_preflight: ClassVar[bool] = False
    sanity_across_nodes: ClassVar[bool] = False   # `devenv sanity` runs across a job's nodes (multi-node)
    autostops: ClassVar[bool] = False             # an idle environment can stop itself (autostop_plan)
    host: HostProfile
    check: Check | None                           # the preflight; None: `up` checks nothing

    # --- what the class answers before anything is opened ----------------------------------------------

    @classmethod
    @abstractmethod
    def open(cls, host: HostProfile, conn: Connection, check: Check | None = None) -> EnvironmentBackend:
        """The backend on conn, wrapped in its runtime (the registry calls this)."""

    @classmethod
    @abstractmethod
    def run_check(cls, conn: Connection, host: HostProfile, env: EnvProfile,
                  on_result: Callable[[CheckResult], None] | None = None) -> CheckReport:
        """Every check of `devenv check` for this host and environment."""

    @classmethod
    @abstractmethod
    def run_preflight(cls, conn: Connection, host: HostProfile, env: EnvProfile,
                      allow_busy: bool = False) -> CheckReport:
        """The check `up` runs before it makes anything."""

    @classmethod
    def watched_places(cls, connect: Callable[[], Connection], host: HostProfile) -> list[JobPlace] | None:
        """What `devenv monitor` samples: None for the host itself (nothing asked), else the nodes of the
        user's running jobs (connect() gives the host's connection)."""
        return None

    # --- the steps of `up` (environments/flow.py decides with them) ----------------------------------------

    @abstractmethod
    def up(self, env: EnvProfile, key: EnvKey | None = None, *, events: Events | None = None,
           options: UpOptions | None = None) -> UpResult:
        """Make, finish or reattach the environment (docs/environments.md's table), and wait until it answers:
        environments/flow.FlowBackend decides, with the steps below."""

    @abstractmethod
    def look(self, env: EnvProfile, key: EnvKey | None, options: UpOptions) -> Existing | None:
        """What the host has of the environment (None: nothing), judged against the profile as it is."""

    @abstractmethod
    def reattach(self, env: EnvProfile, found: Existing, key: EnvKey | None, events: Events,
                 options: UpOptions) -> UpResult:
        """A running environment of the same spec: wait for it to answer (repairing a dead service)."""

    def prepare(self, env: EnvProfile, found: Existing | None, key: EnvKey | None, events: Events,
                options: UpOptions) -> Existing | None:
        """After the preflight, before anything changes: what `up` needs first (an image, a python with
        JupyterLab); returns found judged again when that changed what the spec is."""
        return found

    @abstractmethod
    def finish(self, env: EnvProfile, found: Existing, key: EnvKey | None, events: Events,
               options: UpOptions) -> UpResult | None:
        """A half-made or stopped environment of the same spec, started; None when it cannot be and was
        removed (the flow makes it anew)."""

    @abstractmethod
    def replace_question(self, env: EnvProfile, found: Existing) -> tuple[str, DevenvError]:
        """(the question before a changed environment is replaced, the error when the answer is no)."""

    @abstractmethod
    def remove(self, env: EnvProfile, found: Existing, events: Events) -> None:
        """Take away a changed environment before it is made again (its workspace stays)."""

    @abstractmethod
    def create(self, env: EnvProfile, key: EnvKey | None, action: str, found: Existing | None, events: Events,
               options: UpOptions) -> UpResult:
        """Make the environment and wait until it answers; action says what the result reports (created,
        recreated, started). found: what was there (a stopped one whose leftovers `create` reuses)."""

    # --- down and status ----------------------------------------------------------------------------------

    @abstractmethod
    def down(self, env_name: str, purge: bool = False) -> Removed:
        """Stop and remove it; the workspace stays unless purge (flow.FlowBackend, with take_down)."""

    @abstractmethod
    def take_down(self, env_name: str, purge: bool) -> Removed:
        """down's step: stop and remove what runs (and the workspace with purge); the flow forgets the rest."""

    @abstractmethod
    def status(self, all_owners: bool = True) -> list[EnvStatus]:
        """Every environment the host reports (this owner's only, unless all_owners): one row each
        (flow.FlowBackend, with list_environments)."""

    @abstractmethod
    def list_environments(self, all_owners: bool) -> list[EnvStatus]:
        """status's step: what the host reports, as it reports it."""

    # --- the rest --------------------------------------------------------------------------------------

    @abstractmethod
    def find(self, env_name: str) -> EnvStatus | None: ...

    @abstractmethod
    def volumes(self, env_name: str) -> list[str]:
        """What --purge would delete."""

    @abstractmethod
    def workspace(self, env: EnvProfile) -> str:
        """The workspace folder: inside the environment (a container's), or on the host (~/... there)."""

    @abstractmethod
    def logs(self, env_name: str, tail: int | str = 200, follow: bool = False) -> Iterator[str]: ...

    @abstractmethod
    def exec(self, env_name: str, argv: list[str]) -> ExecStream:
        """argv in the environment through devenv's connection, without stdin: (chunks of (stdout, stderr) as
        they come, the exit code once read: 127 for a missing command, as a shell says). stdin and a terminal
        go through exec_entry."""

    @abstractmethod
    def exec_entry(self, env: EnvProfile, argv: list[str], tty: bool = False) -> ExecEntry | None:
        """argv in the running environment with the user's stdin (a pseudo-terminal when tty), run by the user's
        OpenSSH (cli/exec_ssh); None where no stdin can reach the environment and no tty was asked (a container
        without sshd): exec runs it without."""

    @abstractmethod
    def jupyter_access(self, env_name: str) -> JupyterAccess: ...

    @abstractmethod
    def ssh_target(self, env_name: str) -> SshTarget:
        """Where `devenv ssh` goes for this environment; raises where there is no shell (Shell.NONE)."""

    @abstractmethod
    def command_target(self, env_name: str, host_if_no_env: bool = False) -> CommandTarget:
        """Where commands run with the environment's python; when it is not running: raises, or with
        host_if_no_env runs on the host (the monitor's sanity key)."""

    def autostop_plan(self, env: EnvProfile, result: UpResult) -> AutostopPlan:
        """What the autostop watcher watches beside this environment and how it stops it (where `autostops`)."""
        from devenv.config.autostop import AutostopError

        raise AutostopError(f"autostop is not available for {self.traits.environment} yet",
                            "leave autostop out of the profile, or pass --no-autostop")

    @abstractmethod
    def arm_autostop(self, env: EnvProfile, result: UpResult, setting: Autostop | None,
                     disarm: bool = False) -> str | None:
        """After `up`: start the watcher with setting (None: leave what is there), or end it (disarm); what was
        done, for the result's notes (flow.FlowBackend, with autostop_plan)."""

    @abstractmethod
    def autostop_states(self) -> dict[str, dict[str, Any]]:
        """OWNER-ENV -> what each environment's watcher last wrote (flow.FlowBackend; {} where none runs)."""

    def build_image(self, env: EnvProfile, inputs: BuildInputs,
                    progress: Callable[[ProgressEvent], None]) -> ImageInfo:
        """The environment's image built on the host (no_images() where environments are no containers)."""
        raise no_images(self.host)

    def has_image(self, ref: str) -> bool:
        """Does the host's engine hold the image ref (name or id)? Asked through the backend's own channel to
        the engine (no command on the host where it can); no_images() where environments are no containers."""
        raise no_images(self.host, "look up")

    def prune_images(self, keep_tags: set[str], only_env: str | None, dry_run: bool,
                     step: Callable[[str], None]) -> ImagePrune:
        """Remove the images devenv built on the host that no container uses and no profile names (keep_tags);
        only_env: only those built for that environment. no_images() where environments are no containers."""
        raise no_images(self.host, "prune")

    def run_place(self, env: EnvProfile) -> RunPlace:
        """Where the running environment's detached runs live and how they are started and watched (`devenv
        run`, `runs`, `logs --run`, `cancel`); runs_unsupported() where there are none yet. Raises when the
        environment is not running."""
        raise runs_unsupported(self.host)

    @abstractmethod
    def close(self) -> None: ...
