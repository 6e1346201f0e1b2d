"""The one interface every kind of environment implements (L2), and what passes through it.

An EnvironmentBackend is the environments of one owner on one host, wherever they live: a container
(environments/docker), the bare host (environments/host) or a Slurm job (environments/slurm).
environments.registry is the only code that knows which is which; callers (services.session, and through it the
CLI and the TUI) use this interface and the backend's Traits, never the runtime's name.

Progress and questions go up through Events, which the front end implements: a backend never prints.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from devenv.checks.report import CheckReport
from devenv.config.profiles import EnvProfile, HostProfile
from devenv.env.image_context import BuildInputs
from devenv.env.info import EnvStatus, ImageInfo, ProgressEvent
from devenv.errors import DevenvError
from devenv.services import jupyter

if TYPE_CHECKING:
    from devenv.remote.base import Connection
    from devenv.remote.envkey import EnvKey

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
    """What a kind of backend is like, for the callers that present it (no behaviour hides behind these)."""

    containers: bool        # environments are containers: image, engine and GPU-access checks, `image build`
    shell_on_host: bool     # `devenv ssh` is the host's own sshd (no sshd of the environment's own)
    down_verb: str          # what `down` did to each item it lists: "Removed container", "Stopped", ...
    scheduled: bool = False  # environments are scheduler jobs on nodes behind a login node: the monitor
    #                          watches the nodes of the user's jobs (services/cluster_monitor), not the host


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


def no_images(host: HostProfile) -> DevenvError:
    """The error of `image build` on a host whose environments are no containers."""
    return DevenvError(f"{host.name} uses runtime '{host.runtime}': there is no image to build",
                       "image build is for hosts with `runtime: docker`")


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


class EnvironmentBackend(Protocol):
    """The environments of one owner on one host. Names are environment names (env profiles' names)."""

    traits: Traits
    host: HostProfile

    def up(self, env: EnvProfile, key: EnvKey | None, *, events: Events, options: UpOptions) -> UpResult:
        """Make, finish or reattach the environment (docs/environments.md's table), and wait until it answers."""

    def down(self, env_name: str, purge: bool = False) -> dict[str, list[str]]:
        """Stop and remove it; the workspace stays unless purge. What was removed: {"containers", "volumes"}."""

    def status(self, all_owners: bool = True) -> list[EnvStatus]:
        """Every environment the host reports (this owner's only, unless all_owners)."""

    def find(self, env_name: str) -> EnvStatus | None: ...

    def volumes(self, env_name: str) -> list[str]:
        """What --purge would delete."""

    def logs(self, env_name: str, tail: int | str = 200, follow: bool = False) -> Iterator[str]: ...

    def exec(self, env_name: str, argv: list[str]) -> ExecStream: ...

    def jupyter_access(self, env_name: str) -> JupyterAccess: ...

    def ssh_target(self, env_name: str) -> SshTarget: ...

    def command_target(self, env_name: str, host_if_no_env: bool = False) -> CommandTarget:
        """Where commands run with the environment's python; when it is not running: raises, or with
        host_if_no_env runs on the host (the monitor's sanity key)."""

    def build_image(self, env: EnvProfile, inputs: BuildInputs,
                    progress: Callable[[ProgressEvent], None]) -> ImageInfo:
        """The environment's image built on the host (no_images() where environments are no containers)."""

    def close(self) -> None: ...
