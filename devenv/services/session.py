"""One session for every command on one host's environment (L2): the CLI and the TUI both start here.

    with open_env("testbox", env_name=None, accept_new_host=False, events=printer) as s:
        s.check()  /  s.up(options)  /  s.backend.status()  /  s.open_jupyter(s.backend.jupyter_access(s.env.name))

The session resolves the profiles (host profile or ssh destination; environment: --env < $DEVENV_ENV < the host
profile's default_env), takes the host's pooled connection, and opens the backend of the host's runtime
(services.environments.registry) only when a step needs it: `check` works on a host without Docker, and nothing connects
before the first command. It writes the environment's ssh entry itself, and reports through the events the
front end passed in (services.environments.contract.Events): nothing here prints.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import replace
from functools import cached_property
from typing import Any

from devenv.checks.report import CheckReport, CheckResult
from devenv.config import hostref, profiles
from devenv.config.profiles import EnvProfile, HostProfile
from devenv.env.image_context import BuildInputs
from devenv.env.info import EnvStatus, ImageInfo, ProgressEvent
from devenv.env.spec import CONTAINER_PORTS, user_of
from devenv.errors import DevenvError, ProfileError
from devenv.remote.base import Connection
from devenv.services import jupyter
from devenv.services.background import Background
from devenv.services.environments.contract import (
    CommandTarget,
    EnvironmentBackend,
    Events,
    ImagePrune,
    JupyterAccess,
    QuietEvents,
    Removed,
    Traits,
    UpOptions,
    UpResult,
)
from devenv.services.environments.registry import BackendClass, backend_class, open_backend, settle
from devenv.services.held_tunnel import Tunnel as Tunnel

RELINK_TIMEOUT = 5.0   # one reconnect attempt of a held tunnel: a login that takes longer is tried afresh


def resolve_env(host: HostProfile, flag: str | None) -> EnvProfile:
    """Merge order: host profile's default_env < $DEVENV_ENV < --env. A name no profile has may be a project's
    own environment (config.project_envs): the environment it builds on, under the project's name."""
    name = flag or os.environ.get("DEVENV_ENV") or host.default_env
    try:
        return profiles.load_env(name)
    except ProfileError:
        from devenv.config import project_envs

        project = project_envs.lookup(name)
        if project is None:
            raise
        return replace(profiles.load_env(project.base), name=name)


class EnvSession:
    def __init__(self, profile: HostProfile, conn: Connection, env_name: str | None = None,
                 events: Events | None = None):
        self.profile = profile            # as named: `runtime: auto` not decided yet
        self.conn = conn
        self.events: Events = events or QuietEvents()
        self._env_name = env_name
        self._backend: EnvironmentBackend | None = None
        self._allow_busy = False          # the preflight of this `up`: busy GPUs allowed
        self._relay_ahead = False         # a tunnel follows `up` at once (prestart_tunnels)
        # the preflight, started before `up` asked for it, with the env and allow_busy it checks
        self._early_check: tuple[EnvProfile, bool, Background[CheckReport]] | None = None

    # --- what the session resolves, each when first asked -------------------------------------------------

    @cached_property
    def env(self) -> EnvProfile:
        if self._env_name is None and not os.environ.get("DEVENV_ENV") and self.profile.source == hostref.NO_PROFILE:
            return resolve_env(replace(self.profile, default_env=self._fitting_env()), None)
        return resolve_env(self.profile, self._env_name)

    env_note = ""  # why the environment is the one it is, when the host has no profile to say (said by the CLI)

    def _fitting_env(self) -> str:
        """A host without a profile gets the environment that fits it: `cuda` where an NVIDIA GPU answers
        nvidia-smi, else `cpu` (one round trip)."""
        probe = self.conn.run("nvidia-smi -L 2>/dev/null | grep -q '^GPU '", timeout=30)
        name = "cuda" if probe.ok else "cpu"
        why = "an NVIDIA GPU answers nvidia-smi" if probe.ok else "no NVIDIA GPU answers nvidia-smi"
        self.env_note = (f"{self.profile.name} has no host profile and {why}: environment '{name}' "
                         f"(--env names another)")
        self.events.step(self.env_note)
        return name

    def use_gpus(self, gpus: str | None) -> None:
        """--gpus: the environment's GPUs instead of the profile's `gpus:` (None: the profile's)."""
        if gpus is not None:
            self.env = replace(self.env, gpus=gpus)

    @cached_property
    def host(self) -> HostProfile:
        """The host profile with `auto` decided (one round trip, once per connection)."""
        return settle(self.profile, self.conn)

    @property
    def kind(self) -> BackendClass:
        """The backend class of the host's kind, for what it answers before anything is opened (asks the host
        once when its runtime is `auto`)."""
        return backend_class(self.host)

    @property
    def traits(self) -> Traits:
        """Words for the host's kind of environment (display only)."""
        return self.kind.traits

    @property
    def backend(self) -> EnvironmentBackend:
        if self._backend is None:
            self._backend = open_backend(self.host, self.conn, check=self._preflight)
        return self._backend

    def close(self) -> None:
        """Release the backend's runtime (the pooled connection stays, for tunnels and other sessions)."""
        backend, self._backend = self._backend, None
        if backend is not None:
            backend.close()

    # --- the steps commands share ----------------------------------------------------------------------

    def check(self, on_result: Callable[[CheckResult], None] | None = None) -> CheckReport:
        """Every check of `devenv check` for this host and environment, as its backend has it."""
        opener = getattr(self.conn, "open", None)
        if opener is not None:
            opener()  # raises ConnectError before `auto` is decided: the one fatal condition
        return self.kind.run_check(self.conn, self.host, self.env, on_result)

    def _preflight(self, env: EnvProfile) -> CheckReport:
        """The check `up` runs before it makes anything (the one started early, when it was)."""
        early, self._early_check = self._early_check, None
        if early is not None and early[:2] == (env, self._allow_busy):
            return early[2].result()
        return self._run_preflight(env, self.host, self._allow_busy)

    def _run_preflight(self, env: EnvProfile, host: HostProfile, allow_busy: bool) -> CheckReport:
        """The backend's preflight (a Slurm cluster's: the login node's part of its check)."""
        return backend_class(host).run_preflight(self.conn, host, env, allow_busy)

    def _start_check_early(self) -> None:
        """When this laptop knows of no such environment on the host (never made here, or `down` since), `up`
        will most likely make one and check the host first: start that check now, so that it overlaps the
        connection to the engine and the lookups instead of following them. A guess: if the host has the
        environment after all, nothing waits for the check and its answer is dropped."""
        from devenv.env import state as envstate

        if not self.kind.early_preflight or envstate.load(self.profile.name, self.env.name).get("container"):
            return  # the backend says whether it pays (measured: the engine's, the login node's lookup)
        host, env, allow_busy = self.host, self.env, self._allow_busy
        self._early_check = env, allow_busy, Background(lambda: self._run_preflight(env, host, allow_busy),
                                                        "devenv-early-check")

    def check_ahead(self, allow_busy: bool = False) -> None:
        """`up`'s early check (_start_check_early) started now, as the connection opens: it then overlaps what
        the CLI asks before `up` (the push offer, the engine's connection) as well. up() keeps it when its env
        and allow_busy are the ones checked; drop_check_ahead() when the host changed meanwhile (a push)."""
        if self._early_check is None:
            self._allow_busy = allow_busy
            self._start_check_early()

    def drop_check_ahead(self) -> None:
        """Forget the early check (its answer may predate a change: an image pushed since); up() checks anew."""
        self._early_check = None

    def up(self, options: UpOptions | None = None) -> UpResult:
        """Make or reattach the environment; its ssh entry is written when it runs its own sshd."""
        key = None
        if self.kind.needs_env_key:  # the environment's own sshd accepts devenv's key
            from devenv.remote.envkey import ensure_key

            key = ensure_key()
        if options is None:  # the build inputs of $DEVENV_WHEELHOUSE / $DEVENV_BUILD_CA_BUNDLE, as the CLI's
            options = UpOptions(BuildInputs.from_options(None, None, False))
        if options.pick_gpus is None:  # gpus: N picks the least used free GPUs when the environment is made
            from devenv.services.gpu_occupancy import gpu_picker

            options = replace(options, pick_gpus=gpu_picker(self.conn, self.profile.name,
                                                            allow_busy=options.allow_busy, on_note=self.events.step))
        self._allow_busy = options.allow_busy
        if self._relay_ahead:
            options = replace(options, relay_ahead=True)
        setting = None if options.no_autostop else (options.autostop or self.env.autostop or self.host.autostop)
        if setting is not None and not self.kind.autostops:   # refused before anything is made or submitted
            from devenv.config.autostop import AutostopError

            raise AutostopError(f"autostop is not available for {self.traits.environment} on {self.host.name} "
                                "yet", "leave autostop out of the profiles, or pass --no-autostop (a scheduler's "
                                "job still ends at its own time limit)")
        if self._early_check is None:
            self._start_check_early()
        from devenv.env.spec import owner
        from devenv.services.environments.lock import up_lock

        with up_lock(self.conn, owner(), self.env.name, self.events.step):  # one `up` of it at a time
            result = self.backend.up(self.env, key, events=self.events, options=options)
            # the flag's, else the env profile's, else the host profile's (None: a running watcher stays)
            if setting is not None or options.no_autostop:
                note = self.backend.arm_autostop(self.env, result, setting, disarm=options.no_autostop)
                if note:
                    result.notes.append(note)
        if key and self.env.sshd and result.host_key and "ssh" in result.status.ports:
            from devenv.services.ssh_entry import write_env_entry

            write_env_entry(self.host, self.env.name, result.status.ports["ssh"], result.host_key, key.private_path,
                            user_of(result.status.spec))
        return result

    def down(self, purge: bool = False) -> Removed:
        """Stop and remove the environment (the workspace too with purge), and its ssh entry."""
        removed = self.backend.down(self.env.name, purge=purge)
        from devenv.services.ssh_entry import remove_env_entry

        remove_env_entry(self.host, self.env.name)
        return removed

    def jupyter_of(self, result: UpResult) -> JupyterAccess | None:
        """How to reach the Jupyter `up` started (None when it runs none)."""
        if result.jupyter is not None:
            return result.jupyter
        if not result.token or "jupyter" not in result.status.ports:
            return None
        return JupyterAccess(result.status, result.token, result.status.ports["jupyter"])

    def open_jupyter(self, access: JupyterAccess, local_port: int | None = None, *,
                     exact: bool = False, ready_timeout: float | None = None) -> tuple[str, Tunnel | None]:
        """(Jupyter's URL with its token, the tunnel that carries it: None when this machine is the host).
        exact: local_port itself, never another (a reopened tunnel keeps its port: PortTaken if it is held)."""
        if self.host.local and access.relay is None:
            return jupyter.lab_url(access.port, access.token), None
        from devenv.remote.tunnels import READY_TIMEOUT, Forward, choose_local_port

        preferred = local_port or self.env.ports.get("jupyter", CONTAINER_PORTS["jupyter"])
        forward = Forward("jupyter", "127.0.0.1", access.port,
                          preferred if exact else choose_local_port(preferred))
        tunnel: Tunnel
        if access.relay is not None:
            from devenv.remote.relay import CommandTunnel

            relay = access.relay
            tunnel = CommandTunnel(self.conn, [forward], lambda f: relay, watch=access.ended,
                                   spares={forward.name: access.spare} if access.spare is not None else None)
        else:
            from devenv.remote.tunnels import open_tunnel

            tunnel = open_tunnel(self.host, self.conn, [forward], ready_timeout=ready_timeout or READY_TIMEOUT)
        return jupyter.lab_url(tunnel.forwards[0].local_port, access.token), tunnel

    # --- held tunnels, opened again after their link died (services.held_tunnel) -------------------------

    def relink(self, timeout: float = RELINK_TIMEOUT) -> None:
        """Before a held tunnel is reopened: the host's OpenSSH master logged in again (the proof that the
        network is back), and devenv's own connection answering: one left from before the drop that does not
        answer a keepalive within timeout is dropped, so that the next command dials afresh."""
        from devenv.errors import ConnectError
        from devenv.remote.tunnels import relink

        relink(self.host, timeout)
        ping = getattr(self.conn, "ping", None)
        if ping is None:
            return
        try:
            ping(timeout)
        except ConnectError:
            self.conn.close()

    def reopen_jupyter(self, local_port: int) -> tuple[str, Tunnel | None]:
        """Jupyter's URL and tunnel again on the same local port, found afresh through the backend (an
        environment that restarted has a new port, container or node)."""
        self.relink()
        try:
            access = self.backend.jupyter_access(self.env.name)
        finally:
            self.close()
        return self.open_jupyter(access, local_port, exact=True, ready_timeout=RELINK_TIMEOUT)

    def jupyter_moved(self, forwards: list[Any]) -> bool:
        """Whether the environment's Jupyter is no longer where the held tunnel forwards to (restarted on
        another port, or not running)."""
        from devenv.errors import DevenvError

        try:
            access = self.backend.jupyter_access(self.env.name)
        except DevenvError:
            return True
        finally:
            self.close()
        return access.relay is None and access.port != forwards[0].remote_port

    def forwards_moved(self, forwards: list[Any]) -> bool:
        """Whether the environment is no longer at the address the held tunnel forwards to (a new container,
        or none running)."""
        try:
            status = self.backend.find(self.env.name)
        finally:
            self.close()
        return status is None or not status.running or status.address != forwards[0].remote_host

    def reopen_forwards(self, forwards: list[Any]) -> Tunnel:
        """The environment's forwarded ports again on the same local ports, at its address as the backend
        gives it now (a restarted container has a new one)."""
        from devenv.errors import DevenvError

        self.relink()
        try:
            status = self.backend.find(self.env.name)
        finally:
            self.close()
        if status is None or not status.running or not status.address:
            raise DevenvError(f"the environment '{self.env.name}' on {self.host.name} is not running",
                              f"`devenv up {self.host.name}` starts it; the tunnel reconnects once it runs")
        return self.forward([(f.name, status.address, f.remote_port, f.local_port) for f in forwards],
                            exact=True, ready_timeout=RELINK_TIMEOUT)

    def connect_ahead(self) -> None:
        """Start the host's SSH connection now, in the background (remote.ssh's dial_ahead), so that it overlaps
        the imports and preparations before the first command; nothing to do for this machine."""
        dial_ahead = getattr(self.conn, "dial_ahead", None)
        if dial_ahead is not None:
            dial_ahead()

    def prestart_tunnels(self) -> None:
        """Start the host's OpenSSH tunnel login now, without waiting: it overlaps the work before the tunnel
        (and a backend reached through a relay starts the tunnel's first relay while `up` waits)."""
        self._relay_ahead = True
        if not self.host.local:
            from devenv.remote.tunnels import prestart_tunnels

            prestart_tunnels(self.host)

    def forward(self, wanted: list[tuple[str, str, int, int | None]], *, exact: bool = False,
                ready_timeout: float | None = None) -> Tunnel:
        """Tunnels for (name, remote host, remote port, preferred local port); exact: that port, never another."""
        from devenv.remote.tunnels import READY_TIMEOUT, Forward, choose_local_port, open_tunnel

        forwards = [Forward(name, rhost, rport, pref if exact and pref else choose_local_port(pref))
                    for name, rhost, rport, pref in wanted]
        tunnel: Tunnel = open_tunnel(self.host, self.conn, forwards, ready_timeout=ready_timeout or READY_TIMEOUT)
        return tunnel

    def ssh_alias(self) -> tuple[str | None, str]:
        """(the alias of the environment's entry, written now; None: the shell is the host's own sshd),
        and the entry's text (empty for the host)."""
        target = self.backend.ssh_target(self.env.name)
        if target.on_host or target.port is None or target.host_key is None:
            return None, ""
        from devenv.remote.envkey import ensure_key
        from devenv.services.ssh_entry import entry_text, write_env_entry

        key = ensure_key()
        alias = write_env_entry(self.host, self.env.name, target.port, target.host_key, key.private_path,
                                target.user)
        return alias, entry_text(self.host, self.env.name, target.port, key.private_path, target.user)[1]

    def with_answers(self, statuses: list[EnvStatus]) -> list[EnvStatus]:
        """The statuses, each running one with what its services said when probed on the ports the host
        publishes (EnvStatus.answers; left empty where this connection cannot reach them)."""
        from devenv.services import readiness

        return [replace(status, answers=readiness.answers_of(self.conn, status)) for status in statuses]

    def command_target(self, on_host: bool = False, host_if_no_env: bool = False) -> CommandTarget:
        """Where a program runs with the environment's python (on_host: the host's own python, always;
        host_if_no_env: the host's when no environment runs, instead of refusing)."""
        if on_host:
            return CommandTarget(self.conn, self.host.python, f"host python {self.host.python}", self.conn)
        return self.backend.command_target(self.env.name, host_if_no_env)

    def prune_images(self, only_env: str | None, dry_run: bool) -> ImagePrune:
        """devenv's images on the host that nothing uses, removed (listed only, with dry_run); the tags this
        laptop's env profiles name are kept."""
        return self.backend.prune_images(profile_images(), only_env, dry_run, self.events.step)

    def build_image(self, inputs: BuildInputs, progress: Callable[[ProgressEvent], None]) -> ImageInfo:
        """The environment's image, built on the host from the bundled Dockerfile."""
        return self.backend.build_image(self.env, inputs, progress)


@contextlib.contextmanager
def open_env(host: str | HostProfile, env_name: str | None = None, *, accept_new_host: bool = False,
             events: Events | None = None) -> Iterator[EnvSession]:
    """A session on host (a name, or a profile already loaded) for env_name (None: the default)."""
    from devenv.remote.envkey import chosen_key
    from devenv.remote.pool import get_connection

    profile = hostref.load_host(host) if isinstance(host, str) else host  # a profile, or an ssh destination
    chosen_key()  # a bad $DEVENV_SSH_KEY is bad input (exit 2), said before any connection is tried
    session = EnvSession(profile, get_connection(profile, accept_new_host=accept_new_host), env_name, events)
    if env_name or os.environ.get("DEVENV_ENV"):
        session.env  # noqa: B018  (a named env that cannot be loaded is bad input, exit 2, said before dialling)
    try:
        yield session
    finally:
        session.close()


def profile_images() -> set[str]:
    """The image tags this laptop's env profiles name (a profile that does not load names none)."""
    tags = set()
    for name in profiles.names("envs"):
        try:
            env = profiles.load_env(name)
        except DevenvError:
            continue
        tags.add(env.image)
        if env.project_build is not None:
            tags.add(env.project_build.tag)
    return tags
