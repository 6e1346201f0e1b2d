"""`up`, `down` and `status` for Docker hosts (L2): idempotent, and able to finish what an interrupted `up` left.

`up` decides from what the host reports, never from the laptop's cache:
  no container                      -> check, image, volume, create, put secrets, start, wait
  running, same spec hash           -> reattach (no check, no image work): fast
  created/exited, same spec         -> a half-made or stopped environment: put secrets again, start, wait
  any state, different spec         -> show the diff; on confirmation recreate it, keeping the volumes
The runtime (devenv.runtimes.docker_runtime.DockerRuntime) is passed in; this module never builds one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from devenv import __version__
from devenv.checks.report import CheckReport
from devenv.config.profiles import EnvProfile, HostProfile
from devenv.env import spec as envspec
from devenv.env import state as envstate
from devenv.env.image_context import BuildInputs
from devenv.env.info import (
    ContainerInfo,
    EnvStatus,
    ImageInfo,
    LimitRefused,
    PortInUse,
    ProgressEvent,
    status_from_container,
)
from devenv.errors import DevenvError, NotConfirmed
from devenv.gpu import choose as gpu_choose
from devenv.services import jupyter, readiness
from devenv.services.environments.contract import (
    Check,
    CommandTarget,
    Events,
    ExecEntry,
    ExecStream,
    Existing,
    ImagePrune,
    JupyterAccess,
    Removed,
    RunPlace,
    Shell,
    SshTarget,
    Traits,
    UpOptions,
    UpResult,
    exec_output,
    in_folder,
    pick_free_gpus,
)
from devenv.services.environments.docker import images
from devenv.services.environments.docker.env_connection import ContainerConnection
from devenv.services.environments.flow import FlowBackend

if TYPE_CHECKING:
    from devenv.checks.report import CheckResult
    from devenv.remote.base import Connection
    from devenv.remote.envkey import EnvKey
    from devenv.runtimes.docker_runtime import DockerRuntime
    from devenv.services.environments.autostop import AutostopPlan

AUTHORIZED_KEYS_FILE = "/etc/devenv/authorized_keys"
HOST_KEY_FILE = "/etc/ssh/ssh_host_ed25519_key.pub"
PROBE_INTERVAL = 0.2       # s between readiness probes: each is one channel on the open connection, no process
STEADY_POLLING_S = 30.0    # ... for this long, then ever less often (a slow host)
REPAIR_GRACE_S = 3.0       # a running environment's services may be down this long before `up` repairs them
STARTING_S = 20.0          # a container younger than this is starting: its services get until then
SSHD_RESTART_S = 10.0      # how long sshd started again may take before the container is restarted instead
STOP_TIMEOUT_S = 5         # a hung Jupyter ignores SIGTERM: KILL after this
# The entrypoint's sshd supervisor, started again (the old one is gone if sshd stayed down past the grace).
RESTART_SSHD = ("command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ] || exit 3; mkdir -p /run/sshd; "
                "/usr/sbin/sshd -t || exit 4; "
                "(while :; do /usr/sbin/sshd -D -e || true; echo 'devenv: sshd exited; restarting it' >&2; sleep 1; "
                "done) </dev/null >/proc/1/fd/1 2>/proc/1/fd/2 & exit 0")


class Provisioner(FlowBackend):
    """Environments of one owner on one Docker host."""

    traits = Traits("a container of the host's Docker or podman", down_verb="Removed container")
    shell = Shell.OWN_SSHD
    builds_images = True
    needs_env_key = True        # the container's sshd admits devenv's key
    early_preflight = True      # measured to gain: the engine's lookup is slow enough to overlap

    def __init__(self, runtime: DockerRuntime, host: HostProfile, check: Check | None = None,
                 owner: str | None = None, conn: Connection | None = None):
        self.runtime = runtime
        self.host = host
        self.check = check            # the preflight; None: `up` checks nothing
        self.owner = owner or envspec.owner()
        self.conn = conn              # the host's own connection (commands on the host, beside the engine's)
        self._ports_unreachable = False   # sshd refuses TCP forwarding: readiness is asked from inside
        self._host_keys: dict[str, str] = {}   # container id -> its sshd's host key, read once
        self._made: _Made | None = None        # this `up`'s spec and image, once prepare() has them

    @classmethod
    def open(cls, host: HostProfile, conn: Connection, check: Check | None = None) -> Provisioner:
        """On the host's container engine, through the Docker API over conn (the registry calls this)."""
        from devenv.runtimes.docker_runtime import DockerRuntime

        # the socket the host's docker CLI uses, as the last check found it: the API then needs no shell there
        socket = None if host.local else envstate.host_facts(host.name).get("docker_socket")
        runtime = DockerRuntime.connect(conn, host.name, host.local, host.engine, host.gpu_devices, socket)
        return cls(runtime, host, check, conn=conn)

    @classmethod
    def run_check(cls, conn: Connection, host: HostProfile, env: EnvProfile,
                  on_result: Callable[[CheckResult], None] | None = None) -> CheckReport:
        """The host's probes, with the container engine's (engine, GPU access, the image, disk of its root)."""
        from devenv.services import preflight

        return preflight.run_check(conn, host, env, on_result, with_engine=True)

    @classmethod
    def run_preflight(cls, conn: Connection, host: HostProfile, env: EnvProfile,
                      allow_busy: bool = False) -> CheckReport:
        from devenv.services import preflight
        from devenv.services.preflight_cache import cached_preflight

        # the last clean check stands while one probe finds the host's facts unchanged
        return cached_preflight(conn, host, env, allow_busy, True,
                                lambda: preflight.run_check(conn, host, env, allow_busy=allow_busy, with_engine=True))

    def close(self) -> None:
        self.runtime.close()

    def has_image(self, ref: str) -> bool:
        return self.runtime.image(ref) is not None

    # --- up's steps (environments/flow.py decides) ---------------------------------------------------------

    def look(self, env: EnvProfile, key: EnvKey | None, options: UpOptions) -> Existing | None:
        """The environment's container, judged against the profile and the image the host has now; a
        container holding its name that is not this environment is refused."""
        name = envspec.container_name(self.owner, env.name)
        existing = self._container(env.name)
        squatter = self.runtime.find(name) if existing is None else None
        if squatter is not None:  # the name is ours by construction; whoever holds it is not this environment
            raise DevenvError(f"a container named {name} exists on {self.host.name} but is not this environment "
                              f"(owner {squatter.labels.get(envspec.OWNER) or 'unknown'})",
                              f"remove or rename it (docker rm -f {name}), or set DEVENV_OWNER to use other names")
        self._made = None
        if existing is None:
            return None
        running, same = existing.state == "running", False
        if running:
            image = self.runtime.image(env.image)
            spec = envspec.desired_spec(env, image.id if image else existing.image_id, _fingerprint(key))
            # an image built before the profile's pip/apt/user changed is rebuilt (prepare), not reattached to
            current = image is None or images.is_current(image, env)
            same = current and existing.labels.get(envspec.SPEC_HASH) == envspec.spec_hash(spec)
        return Existing(existing, running, same)

    def prepare(self, env: EnvProfile, found: Existing | None, key: EnvKey | None, events: Events,
                options: UpOptions) -> Existing | None:
        """The bind mounts checked (a refused mount fails in seconds, before any image work), then the image;
        the container judged again against the spec of that image."""
        self._check_binds(env, events)
        image, image_action = images.ensure_image(self.runtime, env, options.build_inputs, events.progress,
                                                  events.step)
        spec = envspec.desired_spec(env, image.id, _fingerprint(key))
        self._made = _Made(spec, image_action)
        if found is None:
            return None
        info: ContainerInfo = found.handle
        same = info.labels.get(envspec.SPEC_HASH) == envspec.spec_hash(spec)
        diff = [] if same else envspec.diff_specs(envspec.spec_from_labels(info.labels), spec)
        return Existing(info, info.state == "running", same, diff)

    def reattach(self, env: EnvProfile, found: Existing, key: EnvKey | None, events: Events,
                 options: UpOptions) -> UpResult:
        info: ContainerInfo = found.handle
        token = self._token_of(env, info.id) if env.jupyter else None
        repair = self._revive(env, info, _public_key(key), options, events)
        result = self._result(env, info.id, "repaired" if repair else "reattached", token, self._image_action())
        result.notes.extend([repair] if repair else [])
        return result

    def finish(self, env: EnvProfile, found: Existing, key: EnvKey | None, events: Events,
               options: UpOptions) -> UpResult | None:
        info: ContainerInfo = found.handle
        events.step(f"Finishing the environment '{env.name}' ({info.state})")
        try:
            token = self._start(env, info.id, _public_key(key), events)
        except (LimitRefused, PortInUse) as exc:  # made by an earlier `up` that stopped here
            events.step(f"{exc.message.splitlines()[0]}; making it again")
            self.runtime.remove(info.id)
            return None
        self._wait(env, info.id, options, events)
        return self._result(env, info.id, "started", token, self._image_action())

    def replace_question(self, env: EnvProfile, found: Existing) -> tuple[str, DevenvError]:
        question = (f"The environment '{env.name}' on {self.host.name} was made from another spec. "
                    f"Recreate it? The workspace volume is kept.")
        refusal = NotConfirmed(f"the environment '{env.name}' differs from its profile and was left as it is:\n  "
                               + "\n  ".join(found.diff),
                               f"run `devenv up {self.host.name} --env {env.name} --yes` to recreate it (the "
                               "workspace is kept), or restore the profile")
        return question, refusal

    def remove(self, env: EnvProfile, found: Existing, events: Events) -> None:
        events.step(f"Recreating '{env.name}' (workspace kept)")
        self.runtime.remove(found.handle.id)

    def create(self, env: EnvProfile, key: EnvKey | None, action: str, found: Existing | None, events: Events,
               options: UpOptions) -> UpResult:
        """Its network, its volumes (found by their labels, else made), the GPUs picked, the container made and
        started, then the wait for its services."""
        if self._made is None:
            raise DevenvError("internal: create before prepare", "report this bug")
        spec = self._made.spec
        network = self._ensure_network(env.name, events)
        volumes: dict[str, str] = {}
        for role in spec["volumes"]:
            # the volume this environment already has (found by its labels: a workspace made under an older
            # name is kept), else a new one under a name no other owner's environment can have
            mine = self.runtime.list_volumes({envspec.MANAGED: "1", envspec.OWNER: self.owner,
                                              envspec.ENV: env.name, envspec.ROLE: role})
            volumes[role] = mine[0] if mine else envspec.volume_name(self.owner, env.name, role)
            if self.runtime.ensure_volume(volumes[role], self._volume_labels(env.name, role)):
                events.step(f"Created volume {volumes[role]}")
        chosen = pick_free_gpus(str(spec["gpus"]), options, events)
        container, token, notes = self._create_and_start(env, spec, _public_key(key), events, chosen, volumes,
                                                         network)
        self._wait(env, container, options, events)
        result = self._result(env, container, action, token, self._image_action())
        result.notes.extend(notes)
        return result

    def _image_action(self) -> str:
        """What this `up` did about the image: present (no image work, or none was needed), built, pulled."""
        return self._made.image_action if self._made is not None else "present"

    def _check_binds(self, env: EnvProfile, events: Events) -> None:
        """Each bind mount's host path, as the host resolves it (links followed), must exist and pass the same
        rules as its text: a link under /data must not lead to /etc."""
        from devenv.env.devcontainer import bind_source_problem

        binds = [m for m in env.mounts if m.type == "bind"]
        if not binds:
            return
        if self.conn is None:
            raise DevenvError("internal: bind mounts need the host's connection", "report this bug")
        import shlex

        for mount in binds:
            result = self.conn.run(f"realpath -e -- {shlex.quote(mount.source)}", timeout=30)
            real = result.stdout.strip()
            if result.exit_code != 0 or not real:
                raise DevenvError(f"mount {mount.source} -> {mount.target}: {mount.source} does not exist on "
                                  f"{self.host.name}", f"make it there (ssh {self.host.name} mkdir -p "
                                  f"{shlex.quote(mount.source)}), or remove the mount from devcontainer.json")
            problem = bind_source_problem(real)
            if problem:
                raise DevenvError(f"mount {mount.source} -> {mount.target}: refused: on {self.host.name} it is "
                                  f"{real}, and the host path {problem}", "bind a data folder of the host")
            events.step(f"Mounting {self.host.name}:{real} at {mount.target}" + (" (read-only)" if mount.readonly
                                                                                 else ""))

    def _ensure_network(self, env_name: str, events: Events) -> str:
        """The environment's own bridge network (found by its labels, else made): only the published ports
        reach its services, never a container on another network."""
        bridgeless = getattr(self.runtime, "bridgeless_network", None)
        mode = bridgeless() if callable(bridgeless) else None
        if mode is not None:  # podman: on no bridge at all (a bridge of its own would not keep siblings out)
            events.step(f"Network: {mode} (on no bridge: only the published 127.0.0.1 ports reach it)")
            return str(mode)
        labels = self._volume_labels(env_name, "network")
        mine = self.runtime.list_networks({k: labels[k] for k in (envspec.MANAGED, envspec.OWNER, envspec.ENV)})
        name = mine[0] if mine else envspec.network_name(self.owner, env_name)
        if self.runtime.ensure_network(name, labels):
            events.step(f"Created network {name}")
        return name

    def _create_and_start(self, env: EnvProfile, spec: dict[str, Any], public_key: str, events: Events,
                          chosen_gpus: str | None = None, volumes: dict[str, str] | None = None,
                          network: str | None = None) -> tuple[str, str | None, list[str]]:
        """Create and start. A taken preferred port is replaced by a free one, a ulimit the host refuses is
        dropped; both are said in the result's notes."""
        any_port: set[str] = set()
        refused: set[str] = set(envstate.host_facts(self.host.name).get("refused_ulimits", []))
        notes: list[str] = [f"{self.host.name} refuses ulimit {name} for containers (learned earlier); "
                            f"started without it" for name in sorted(refused)]
        while True:
            request = envspec.container_request(spec, self.owner, self.host.name, __version__, any_port,
                                                chosen_gpus, volumes, network)
            for name in refused:
                request.ulimits.pop(name, None)
            events.step(f"Creating container {request.name}")
            container = self.runtime.create(request)
            try:
                token = self._start(env, container, public_key, events)
                return container, token, notes
            except LimitRefused as exc:
                self.runtime.remove(container)
                # A limit the engine adds by itself (podman sets nofile/nproc whenever any limit is asked for):
                # ask for none, so the engine's own configured defaults apply.
                dropped = {exc.name} if exc.name in request.ulimits else set(request.ulimits)
                if not dropped or dropped <= refused:
                    raise
                refused |= dropped
                envstate.update_host_facts(self.host.name, refused_ulimits=sorted(refused))
                note = (f"{self.host.name} refuses ulimit {exc.name} for containers; "
                        f"started without {', '.join(sorted(dropped))}")
                notes.append(note)
                events.step(note)
            except PortInUse as exc:
                self.runtime.remove(container)
                taken = {svc for svc, port in spec["ports"].items() if exc.port in (None, port)} - any_port
                if not taken:
                    raise
                any_port |= taken
                note = (f"127.0.0.1:{exc.port} is taken on {self.host.name}; "
                        f"publishing {', '.join(sorted(taken))} on a free port instead")
                notes.append(note)
                events.step(note)

    def _start(self, env: EnvProfile, container: str, public_key: str, events: Events) -> str | None:
        """Put the secrets in (again: an interrupted `up` may have stopped before), then start."""
        files = []
        token = None
        if env.jupyter:
            token = self._token_of(env, container) or jupyter.new_token()
            files.append((jupyter.TOKEN_FILE, token.encode() + b"\n", 0o600))
        if env.sshd:
            files.append((AUTHORIZED_KEYS_FILE, public_key.strip().encode() + b"\n", 0o644))
        if files:
            self.runtime.put_files(container, files)
        envstate.update(self.host.name, env.name, container=container, token=token)
        events.step("Starting the environment")
        self.runtime.start(container)
        return token

    def _wait(self, env: EnvProfile, container: str, options: UpOptions, events: Events,
              timeout: float | None = None, say: bool = True) -> float:
        """Until every service of the environment answers (NotReady past the timeout, or once it stops)."""
        services = _services(env)
        if not services:
            return 0.0
        timeout = options.ready_timeout if timeout is None else timeout
        if say:
            events.step(f"Waiting for {' and '.join(services)} (at most {timeout:.0f} s)")
        answered: dict[str, str] = {}
        key_read = False

        def probe() -> jupyter.Probe:
            nonlocal key_read
            result = self._probe(container, services, answered)
            if "sshd" in answered and not result.ok and not key_read:
                key_read = True
                self._host_key_of(env, container)  # read while Jupyter still starts, not after it answers
            return result

        return jupyter.wait_ready(probe,
                                  lambda: list(self.runtime.logs(container, tail=30)),
                                  host=self.host.name, timeout=timeout, interval=PROBE_INTERVAL,
                                  steady_for=STEADY_POLLING_S, on_wait=events.waiting)

    def _probe(self, container: str, services: list[str], answered: dict[str, str] | None = None) -> jupyter.Probe:
        """One look: is the container running, and do its services answer on the ports it publishes? A service
        in answered (what it said) is not asked again: each probe of sshd is a line pair in the environment's
        log ("Connection closed by ..."), which a wait of 0.2 s polls would fill with them."""
        answered = {} if answered is None else answered
        info = self.runtime.find(container)
        if info is None or info.state not in ("running",):
            state = info.state if info else "removed"
            detail = f" (exit code {info.exit_code})" if info and info.state == "exited" else ""
            if info is not None and info.state == "restarting":
                detail = f" (crashed and restarting, {info.restart_count} restarts)"
            return jupyter.Probe(False, "", stopped=f"the container is {state}{detail}")
        asked = [name for name in services if name not in answered]
        probe = None
        if self.conn is not None and not self._ports_unreachable:
            ports = status_from_container(info, self.host.name).ports
            try:
                probe = readiness.probe_ports(self.conn, ports, asked)
            except readiness.CannotProbe:  # sshd refuses TCP forwarding: ask from inside, as before
                self._ports_unreachable = True
        if probe is None:
            code, out, err = self.runtime.exec(container, ["devenv-ready", *asked])
            probe = jupyter.Probe(code == 0, (out + err).strip())
        for line in probe.text.splitlines():
            name, _, said = line.partition(" ")
            if name in asked and said.startswith("ok"):
                answered[name] = line
        down = tuple(name for name in services if name not in answered)
        text = "\n".join([answered[name] for name in services if name in answered]
                         + [line for line in probe.text.splitlines() if line.partition(" ")[0] not in answered])
        return jupyter.Probe(not down, text, down=down)

    def _revive(self, env: EnvProfile, info: ContainerInfo, public_key: str, options: UpOptions,
                events: Events) -> str | None:
        """A running environment whose services do not answer is repaired, not waited on: after a short grace
        (sshd's supervisor restarts it within a second; a fresh start gets until STARTING_S of its age), sshd
        alone is started again (Jupyter and its kernels live on), else the container is restarted. What was
        done, for the result's notes; None when everything answered."""
        services = _services(env)
        if not services:
            return None
        first = self._probe(info.id, services)
        if first.ok:
            return None
        grace = min(max(REPAIR_GRACE_S, STARTING_S - _age_s(info.started_at)), options.ready_timeout)
        down = readiness.down_of(first)
        events.step(f"'{env.name}' is running but {', '.join(down) or 'a service'} does not answer; "
                    f"giving it {grace:.0f} s")
        try:
            self._wait(env, info.id, options, events, timeout=grace, say=False)
            return None
        except jupyter.NotReady as exc:
            if exc.last.stopped is not None:  # it stopped meanwhile (or crash-loops): its log says why
                raise
            last = exc.last
        down = readiness.down_of(last)
        said = ", ".join(f"{name} not answering" for name in down) or "not answering"
        if down == ("sshd",) and self._restart_sshd(info.id):
            events.step(f"sshd in '{env.name}' did not answer; started it again")
            try:
                self._wait(env, info.id, options, events, timeout=min(SSHD_RESTART_S, options.ready_timeout))
                return f"sshd in '{env.name}' did not answer; devenv started it again"
            except jupyter.NotReady:
                pass
        events.step(f"'{env.name}' is running but {said}; restarting its container (the workspace is kept)")
        self.runtime.stop(info.id, timeout=STOP_TIMEOUT_S)
        self._start(env, info.id, public_key, events)
        self._wait(env, info.id, options, events)
        return f"'{env.name}' was running but {said}; devenv restarted its container"

    def _restart_sshd(self, container: str) -> bool:
        """sshd started again inside, under the same supervision as the entrypoint's, logging to the container's
        output (PID 1's). False when the image has no sshd or its config is broken."""
        code, _, _ = self.runtime.exec(container, ["sh", "-c", RESTART_SSHD])
        return code == 0

    def _token_of(self, env: EnvProfile, container: str) -> str | None:
        """The environment's token: the laptop's cache if it belongs to this container, else the host's file."""
        cached = envstate.load(self.host.name, env.name)
        if cached.get("container") == container and cached.get("token"):
            return str(cached["token"])
        data = self.runtime.read_file(container, jupyter.TOKEN_FILE)
        token = data.decode().strip() if data else ""
        return token if len(token) >= 32 else None

    def _result(self, env: EnvProfile, container: str, action: str, token: str | None,
                image_action: str) -> UpResult:
        info = self.runtime.find(container)
        if info is None:
            raise DevenvError(f"the environment '{env.name}' vanished from {self.host.name} while starting",
                              "someone removed it; run `devenv up` again")
        status = status_from_container(info, self.host.name)
        host_key = self._host_key_of(env, container) if env.sshd else None
        envstate.update(self.host.name, env.name, container=container, token=token, ports=status.ports,
                        host_key=host_key, spec_hash=status.spec_hash, owner=self.owner)
        return UpResult(status, action, token, host_key, image_action)

    def _host_key_of(self, env: EnvProfile, container: str) -> str | None:
        """The environment's sshd host key ("TYPE BASE64"): made at the container's first start and kept with
        it, so the laptop's cache holds it once it was read, and a read during the wait is kept for the result."""
        if container in self._host_keys:
            return self._host_keys[container]
        cached = envstate.load(self.host.name, env.name)
        host_key = cached.get("host_key") if cached.get("container") == container else None
        if not host_key:
            data = self.runtime.read_file(container, HOST_KEY_FILE)
            host_key = " ".join(data.decode().split()[:2]) if data else None
        if host_key:
            self._host_keys[container] = host_key
        return host_key

    def _volume_labels(self, env_name: str, role: str) -> dict[str, str]:
        return {envspec.MANAGED: "1", envspec.ENV: env_name, envspec.OWNER: self.owner, envspec.HOST: self.host.name,
                envspec.ROLE: role, envspec.VERSION: __version__}

    # --- status, down ----------------------------------------------------------------------------------

    def list_environments(self, all_owners: bool) -> list[EnvStatus]:
        filters = {envspec.MANAGED: "1"}
        if not all_owners:
            filters[envspec.OWNER] = self.owner
        return [status_from_container(c, self.host.name) for c in self.runtime.list_managed(filters)]

    def find(self, env_name: str) -> EnvStatus | None:
        info = self._container(env_name)
        return status_from_container(info, self.host.name) if info is not None else None

    def _container(self, env_name: str) -> ContainerInfo | None:
        """This owner's environment, by labels that name owner and env exactly (never by a name, which another
        owner's environment could share). The host label names the host as this laptop calls it; the same daemon
        reached under another name (an alias) still holds the same environment, so an exact host is preferred."""
        found = self.runtime.list_managed({envspec.MANAGED: "1", envspec.OWNER: self.owner, envspec.ENV: env_name})
        exact = [c for c in found if c.labels.get(envspec.HOST) == self.host.name]
        return next(iter(exact or found), None)

    def volumes(self, env_name: str) -> list[str]:
        return self.runtime.list_volumes({envspec.MANAGED: "1", envspec.OWNER: self.owner, envspec.ENV: env_name})

    def take_down(self, env_name: str, purge: bool) -> Removed:
        """Remove the container, and its network (volumes kept unless purge)."""
        removed = Removed(self.traits.down_verb)
        current = self.find(env_name)
        if current is not None:
            self.runtime.stop(_id(current), timeout=10)
            self.runtime.remove(_id(current))
            removed.items.append(current.name or _id(current))
        # its network too (a container is what holds one; one left by an interrupted `up` goes as well)
        for network in self.runtime.list_networks({envspec.MANAGED: "1", envspec.OWNER: self.owner,
                                                   envspec.ENV: env_name}):
            if self.runtime.remove_network(network):
                removed.networks.append(network)
        if purge:
            for volume in self.volumes(env_name):
                if self.runtime.remove_volume(volume):
                    removed.volumes.append(volume)
        return removed

    def workspace(self, env: EnvProfile) -> str:
        return env.volumes.get("workspace", "/workspace")

    autostops = True

    def autostop_plan(self, env: EnvProfile, result: UpResult) -> AutostopPlan:
        """The watcher runs on the host beside the container (never inside: the container's restart policy,
        unless-stopped, would start it again after an exit from within), with the host's python; it sees the
        container's processes in the host's /proc by their cgroup, and stops it with the engine's CLI."""
        from devenv.env.runs import RUNS_FOLDER
        from devenv.services.environments.autostop import AutostopPlan

        container = result.status.container
        if not container:
            raise DevenvError(f"no container for '{env.name}' to watch", "run `devenv up` again")
        engine = "podman" if getattr(self.runtime, "engine", None) is not None and \
            self.runtime.engine.name == "podman" else "docker"
        gpus = _watched_gpus(result.status.gpus or env.gpus)
        workspace = self.workspace(env)
        return AutostopPlan(
            key=f"{self.owner}-{env.name}", python=self.host.python,
            sessions={"kind": "container", "container_id": container}, gpus=gpus,
            runs_dir=f"{workspace}/{RUNS_FOLDER}", runs_exec=[engine, "exec", container],
            stop_steps=[{"argv": [engine, "stop", container]}],
            down_steps=[{"argv": [engine, "rm", "-f", container]}],
            hook_prefix=[engine, "exec", "-w", workspace, container],
            jupyter_port=result.status.ports.get("jupyter") if env.jupyter else None,
            token=result.token if env.jupyter else None)

    def container_of(self, env_name: str) -> str:
        current = self.find(env_name)
        if current is None:
            raise DevenvError(f"no environment '{env_name}' on {self.host.name}",
                              f"start it with `devenv up {self.host.name} --env {env_name}`; "
                              f"`devenv status {self.host.name}` lists what is there")
        return _id(current)

    def running_container_of(self, env_name: str) -> str:
        return self._running(env_name).container or ""

    def _running(self, env_name: str) -> EnvStatus:
        current = self.find(env_name)
        if current is None or not current.running or not current.container:
            state = current.state if current else "absent"
            raise DevenvError(f"the environment '{env_name}' on {self.host.name} is {state}",
                              f"start it with `devenv up {self.host.name} --env {env_name}`")
        return current

    def jupyter_access(self, env_name: str) -> JupyterAccess:
        """(the running environment, its Jupyter token), the token read back from the host if not cached."""
        current = self.find(env_name)
        if current is None or not current.running or "jupyter" not in current.ports:
            state = current.state if current else "absent"
            raise DevenvError(f"the environment '{env_name}' on {self.host.name} has no running Jupyter ({state})",
                              f"start it with `devenv up {self.host.name} --env {env_name}`")
        cached = envstate.load(self.host.name, env_name)
        token = cached.get("token") if cached.get("container") == current.container else None
        if not token:
            data = self.runtime.read_file(_id(current), jupyter.TOKEN_FILE)
            token = data.decode().strip() if data else ""
            if not token:
                raise DevenvError(f"the environment '{env_name}' on {self.host.name} has no Jupyter token",
                                  f"recreate it: `devenv down {self.host.name}` then `devenv up {self.host.name}`")
            envstate.update(self.host.name, env_name, container=current.container, token=token, ports=current.ports)
        return JupyterAccess(current, token, current.ports["jupyter"])

    def ssh_target(self, env_name: str) -> SshTarget:
        """(the host port publishing the environment's sshd on 127.0.0.1, its host key) of a running environment."""
        current = self.find(env_name)
        if current is None or not current.running or "ssh" not in current.ports:
            state = current.state if current else "absent"
            raise DevenvError(f"the environment '{env_name}' on {self.host.name} has no running sshd ({state})",
                              f"start it with `devenv up {self.host.name} --env {env_name}` "
                              "(and sshd: true in its profile)")
        data = self.runtime.read_file(_id(current), HOST_KEY_FILE)
        if not data:
            raise DevenvError(f"the environment '{env_name}' on {self.host.name} has no sshd host key yet",
                              "wait until `devenv up` reports it ready, then try again")
        return SshTarget(current.ports["ssh"], " ".join(data.decode().split()[:2]), envspec.user_of(current.spec))

    def logs(self, env_name: str, tail: int | str = 200, follow: bool = False) -> Iterator[str]:
        """The environment's log lines (Jupyter and sshd write to the container's output)."""
        return self.runtime.logs(self.container_of(env_name), tail=tail, follow=follow)

    def exec(self, env_name: str, argv: list[str]) -> ExecStream:
        """(chunks of (stdout, stderr) bytes, a function giving the exit code once they are read), run as the
        environment's user (its spec says which; root unless it has its own)."""
        current = self._running(env_name)
        container = _id(current)
        user = envspec.user_of(current.spec)
        if user == "root":
            return _as_a_shell_says(self.runtime.exec_stream(container, argv), argv)
        return _as_a_shell_says(self.runtime.exec_stream(container, argv, user=user), argv)

    def exec_entry(self, env: EnvProfile, argv: list[str], tty: bool = False) -> ExecEntry | None:
        """argv in the workspace through the environment's own sshd (Docker's exec API over devenv's connection
        carries no stdin); without sshd, None (the command runs without stdin), or with tty an error."""
        if not env.sshd:
            if not tty:
                return None
            raise DevenvError(f"the environment '{env.name}' on {self.host.name} has no sshd of its own",
                              "set `sshd: true` in its profile and run `devenv up` again")
        return ExecEntry(in_folder(self.workspace(env), argv), on_host=False)

    def build_image(self, env: EnvProfile, inputs: BuildInputs,
                    progress: Callable[[ProgressEvent], None]) -> ImageInfo:
        return images.build_image(self.runtime, env, inputs, progress)

    def prune_images(self, keep_tags: set[str], only_env: str | None, dry_run: bool,
                     step: Callable[[str], None]) -> ImagePrune:
        from devenv.services.environments.docker import prune

        return prune.prune(self.runtime, keep_tags, only_env, dry_run, step)

    def run_place(self, env: EnvProfile) -> RunPlace:
        """Runs in the container, their folder in the workspace volume (it outlives the container). A container
        cannot stop or remove itself (its restart policy would start it again): `--then` is a watcher on the
        host, beside the engine, that waits for the run's end inside the container and then stops or removes
        it with the engine's own CLI."""
        from devenv.env.runs import RUNS_FOLDER

        current = self._running(env.name)
        container, user = _id(current), envspec.user_of(current.spec)

        def script(text: str, args: list[str]) -> tuple[int, str, str]:   # exec's, without asking for it again
            argv = ["sh", "-c", text, "devenv", *args]
            stream = self.runtime.exec_stream(container, argv) if user == "root" else \
                self.runtime.exec_stream(container, argv, user=user)
            return exec_output(_as_a_shell_says(stream, argv))

        def watch_end(folder: str, action: str) -> None:
            self._watch_end(container, folder, action)

        offered: dict[str, list[str]] = {"stop": [], "down": []} if self.conn is not None else {}
        return RunPlace(f"{self.workspace(env)}/{RUNS_FOLDER}", script, script, then=offered,
                        watch_end=watch_end if offered else None)

    def _watch_end(self, container: str, folder: str, action: str) -> None:
        import shlex

        named = re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}", container)
        if self.conn is None or action not in ("stop", "down") or not named:
            raise DevenvError("internal: no watcher for this run's end", "run it without --then")
        cli = "podman" if self.runtime.engine.name == "podman" else "docker"
        watcher = ('c=$1; d=$2; a=$3; cli=$4; '
                   '"$cli" exec "$c" sh -c \'while [ ! -e "$1/exit" ]; do sleep 1; done; i=0; '
                   'while [ -e "$1/following" ] && [ ! -e "$1/seen" ] && [ $i -lt 15 ]; do sleep 1; i=$((i+1)); done\' '
                   'devenv "$d" >/dev/null 2>&1; '
                   '"$cli" exec "$c" test -e "$d/exit" || exit 0; '
                   'if [ "$a" = stop ]; then exec "$cli" stop "$c"; fi; '
                   'nets=$("$cli" inspect -f \'{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}\' "$c"); '
                   '"$cli" rm -f "$c"; for n in $nets; do case $n in devenv-*) "$cli" network rm "$n";; esac; done')
        words = ["sh", "-c", watcher, "devenv", container, folder, action, cli]
        result = self.conn.run("setsid nohup " + " ".join(shlex.quote(w) for w in words)
                               + " </dev/null >/dev/null 2>&1 & echo started", timeout=30)
        if "started" not in result.stdout:
            raise DevenvError(f"the watcher for --then {action} did not start on {self.host.name}: "
                              f"{(result.stderr or result.stdout).strip()[-200:]}", "run it without --then")

    def command_target(self, env_name: str, host_if_no_env: bool = False) -> CommandTarget:
        """The environment's container, with its python and torch, and the host GPUs it was given."""
        if self.conn is None:
            raise DevenvError("internal: this backend was made without the host's connection",
                              "open backends with services.environments.registry.open_backend")
        python = self.host.python
        status = self.find(env_name)
        if host_if_no_env and (status is None or not status.running):
            return CommandTarget(self.conn, python, f"host python {python}, no environment running", self.conn)
        container = self.running_container_of(env_name)
        labels_gpus = (status.gpus if status is not None else None) or ""
        spec_gpus = str(((status.spec if status else None) or {}).get("gpus") or "")
        among = gpu_choose.indices_of(labels_gpus) if labels_gpus else None
        if among is None and spec_gpus and not spec_gpus.startswith(gpu_choose.FREE_PREFIX):
            among = gpu_choose.indices_of(spec_gpus)
        return CommandTarget(ContainerConnection(self.runtime, container, self.host.name), "python3",
                             f"environment '{env_name}'", self.conn, container, among)


@dataclass(frozen=True)
class _Made:
    """What this `up` makes the container from, once prepare() has the image."""

    spec: dict[str, Any]
    image_action: str          # present | built | pulled


def _public_key(key: EnvKey | None) -> str:
    return key.public_line if key else ""


def _fingerprint(key: EnvKey | None) -> str:
    return key.fingerprint if key else ""


def _as_a_shell_says(stream: tuple[Iterator[tuple[bytes | None, bytes | None]], Callable[[], int]],
                     argv: list[str]) -> ExecStream:
    """The engine's exec stream as the contract's: a side with nothing this time is b"" (the engine gives None),
    and a command the container does not have exits 127 with one line on stderr, as ssh's shell says it (the
    engine says 126 and 'OCI runtime exec failed: ... executable file not found in $PATH: unknown' on stdout)."""
    chunks, exit_code = stream
    missing = False

    def passed_on() -> Iterator[tuple[bytes, bytes]]:
        nonlocal missing
        for index, (out, err) in enumerate(chunks):
            if index == 0 and out and out.startswith(b"OCI runtime exec failed") and b"executable file not found" \
                    in out:
                missing = True
                yield b"", f"{argv[0]}: command not found\n".encode(errors="replace")
                continue
            yield out or b"", err or b""

    return passed_on(), lambda: 127 if missing else exit_code()


def _id(current: EnvStatus) -> str:
    """A docker environment's container id (status_from_container always sets it; the type allows None for the
    backends without a container)."""
    if not current.container:
        raise DevenvError(f"the environment '{current.env}' on {current.host} has no container id",
                          f"`devenv status {current.host}` shows what the engine lists")
    return current.container


def _services(env: EnvProfile) -> list[str]:
    """The services the environment runs, as probes name them ("jupyter", "sshd")."""
    return [readiness.SERVICE_OF[name] for name in envspec.services(env)]


def _age_s(started_at: str) -> float:
    """Seconds since Docker's State.StartedAt ("2026-12-01T10:00:00.123456789Z"); large when unreadable."""
    found = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)?$", started_at.strip())
    if found is None:
        return float("inf")
    zone = found[3] if found[3] and found[3] != "Z" else "+00:00"
    when = datetime.fromisoformat(found[1] + (found[2] or "")[:7] + zone)  # Python 3.10 reads 6 digits at most
    return (datetime.now(timezone.utc) - when).total_seconds()


def _watched_gpus(gpus: str | None) -> str:
    """The GPUs the autostop watcher samples: "none", "all" or host indices "0,2" (a pick not yet made: all)."""
    text = str(gpus or "none").strip()
    if text in ("none", ""):
        return "none"
    text = text.removeprefix("device=")
    return text if re.fullmatch(r"\d+(,\d+)*", text) else "all"
