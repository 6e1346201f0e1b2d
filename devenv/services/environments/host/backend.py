"""`up`, `down`, `status` for hosts without Docker (L2): Jupyter run detached by the host's python.

The steps of environments/flow.py's decisions, read from the host's state.json instead of labels:
  nothing, or a dead Jupyter           -> check, then start it (the token is reused if the host has one)
  alive, same spec                     -> reattach
  alive, different spec                -> diff, confirm, restart
There is no second sshd: `devenv ssh` goes to the host itself. The runtime is a HostRuntime, passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from devenv import __version__
from devenv.config.profiles import EnvProfile, HostProfile
from devenv.env import spec as envspec
from devenv.env import state as envstate
from devenv.env.info import EnvStatus
from devenv.errors import DevenvError, NotConfirmed
from devenv.services import jupyter
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
    exec_output,
    pick_free_gpus,
    stream_output,
)
from devenv.services.environments.flow import FlowBackend

if TYPE_CHECKING:
    from devenv.checks.report import CheckReport, CheckResult
    from devenv.remote.base import Connection
    from devenv.remote.envkey import EnvKey
    from devenv.runtimes.host_runtime import HostRuntime
    from devenv.services.environments.autostop import AutostopPlan


class HostProvisioner(FlowBackend):
    """Environments of one owner on a host without Docker."""

    traits = Traits("Jupyter run by the host's python", down_verb="Stopped")
    shell = Shell.HOST          # the host's own sshd serves the shell: there is no second sshd

    def __init__(self, runtime: HostRuntime, host: HostProfile, conn: Connection, check: Check | None = None,
                 owner: str | None = None):
        self.runtime = runtime
        self.host = host
        self.conn = conn
        self.check = check            # the preflight; None: `up` checks nothing
        self.owner = owner or envspec.owner()

    @classmethod
    def open(cls, host: HostProfile, conn: Connection, check: Check | None = None) -> HostProvisioner:
        from devenv.runtimes.host_runtime import HostRuntime

        return cls(HostRuntime(conn, host), host, conn, check)

    @classmethod
    def run_check(cls, conn: Connection, host: HostProfile, env: EnvProfile,
                  on_result: Callable[[CheckResult], None] | None = None) -> CheckReport:
        """The host's probes, with its python (no engine: the host's python runs the environment)."""
        from devenv.services import preflight

        return preflight.run_check(conn, host, env, on_result)

    @classmethod
    def run_preflight(cls, conn: Connection, host: HostProfile, env: EnvProfile,
                      allow_busy: bool = False) -> CheckReport:
        from devenv.services import preflight
        from devenv.services.preflight_cache import cached_preflight

        # the last clean check stands while one probe finds the host's facts unchanged
        return cached_preflight(conn, host, env, allow_busy, False,
                                lambda: preflight.run_check(conn, host, env, allow_busy=allow_busy))

    def close(self) -> None:
        self.runtime.close()

    def key(self, env_name: str) -> str:
        return f"{self.owner}-{env_name}"

    def spec(self, env: EnvProfile) -> dict[str, Any]:
        spec = {"env": env.name, "runtime": "host", "python": self.host.python,
                "port": env.ports.get("jupyter", envspec.CONTAINER_PORTS["jupyter"]), "jupyter": env.jupyter}
        if env.gpus != "all":  # left out for the default, so that environments made before keep their hash
            spec["gpus"] = env.gpus
        return spec

    # --- up's steps (environments/flow.py decides) ---------------------------------------------------------

    def look(self, env: EnvProfile, key: EnvKey | None, options: UpOptions) -> Existing | None:
        """The environment's state on the host: a live Jupyter judged by its spec; a dead one keeps nothing of
        its spec, so starting it again with the profile's finishes it (no question)."""
        if not env.jupyter:
            raise DevenvError(f"environment '{env.name}' runs no Jupyter: on a `runtime: host` host there is "
                              f"nothing to start", f"use `devenv ssh {self.host.name}` to work on the host")
        current = self.runtime.state(self.key(env.name))
        if not current:
            return None
        spec = self.spec(env)
        if not current.get("alive"):
            return Existing(current, running=False, same=True)
        same = current.get("spec_hash") == envspec.spec_hash(spec)
        return Existing(current, True, same, [] if same else envspec.diff_specs(current.get("spec"), spec))

    def reattach(self, env: EnvProfile, found: Existing, key: EnvKey | None, events: Events,
                 options: UpOptions) -> UpResult:
        token = self._token(env, self.key(env.name))
        self._wait(found.handle, options, events)
        return self._result(env, found.handle, "reattached", token)

    def prepare(self, env: EnvProfile, found: Existing | None, key: EnvKey | None, events: Events,
                options: UpOptions) -> Existing | None:
        """The host's python must have JupyterLab."""
        facts = self.runtime.python_facts()
        if not facts.get("jupyterlab"):
            raise DevenvError(f"{self.host.python} on {self.host.name} (python {facts.get('python')}) has no "
                              f"JupyterLab", f"install it there: {self.host.python} -m pip install jupyterlab")
        return found

    def finish(self, env: EnvProfile, found: Existing, key: EnvKey | None, events: Events,
               options: UpOptions) -> UpResult | None:
        """It ran before (a reboot, a crash, an interrupted up): started again, with its token."""
        return self.create(env, key, "started", found, events, options)

    def replace_question(self, env: EnvProfile, found: Existing) -> tuple[str, DevenvError]:
        question = f"Jupyter for '{env.name}' on {self.host.name} runs with another spec. Restart it?"
        refusal = NotConfirmed(f"the environment '{env.name}' differs from its profile and was left as it is:\n  "
                               + "\n  ".join(found.diff),
                               f"run `devenv up {self.host.name} --env {env.name} --yes` to restart it")
        return question, refusal

    def remove(self, env: EnvProfile, found: Existing, events: Events) -> None:
        events.step(f"Stopping Jupyter for '{env.name}'")
        self.runtime.stop(found.handle)

    def create(self, env: EnvProfile, key: EnvKey | None, action: str, found: Existing | None, events: Events,
               options: UpOptions) -> UpResult:
        """Jupyter started detached by the host's python (the token kept when the host has one)."""
        env_key, spec = self.key(env.name), self.spec(env)
        # no device cgroup on a bare host: the choice becomes CUDA_VISIBLE_DEVICES (see the runtime)
        gpus = pick_free_gpus(env.gpus, options, events) or env.gpus
        token = (self.runtime.read_token(env_key) if found else None) or jupyter.new_token()
        self.runtime.prepare(env_key, token)
        events.step(f"Starting Jupyter with {self.host.python} on {self.host.name}'s loopback"
                    + ("" if gpus == "all" else f" (CUDA_VISIBLE_DEVICES={gpus if gpus != 'none' else ''})"))
        state = {"env": env.name, "owner": self.owner, "host": self.host.name, "runtime": "host",
                 "spec": spec, "spec_hash": envspec.spec_hash(spec), "python": self.host.python,
                 "version": __version__, "gpus": gpus}
        launched = self.runtime.launch(env_key, env.name, spec["port"], state)
        launched["alive"] = True
        envstate.update(self.host.name, env.name, container=str(launched["pid"]), token=token,
                        ports={"jupyter": launched["port"]})
        self._wait(launched, options, events)
        result = self._result(env, launched, action, token)
        if launched["port"] != spec["port"]:
            result.notes.append(f"127.0.0.1:{spec['port']} is taken on {self.host.name}; "
                                f"Jupyter listens on {launched['port']} instead")
        return result

    def _wait(self, state: dict[str, Any], options: UpOptions, events: Events) -> float:
        port = state["port"]
        key = state.get("dir", "").rsplit("/", 1)[-1] or self.key(state["env"])

        def probe() -> jupyter.Probe:
            alive = self.runtime.state(key)
            if not alive or not alive.get("alive"):
                return jupyter.Probe(False, "", stopped="Jupyter exited")
            ok, text = self.runtime.probe(port)
            return jupyter.Probe(ok, text)

        events.step(f"Waiting for jupyter (at most {options.ready_timeout:.0f} s)")
        return jupyter.wait_ready(probe, lambda: list(self.runtime.logs(key, tail=30)), host=self.host.name,
                                  timeout=options.ready_timeout, on_wait=events.waiting)

    def _token(self, env: EnvProfile, key: str) -> str | None:
        cached = envstate.load(self.host.name, env.name)
        return cached.get("token") or self.runtime.read_token(key)

    def _result(self, env: EnvProfile, state: dict[str, Any], action: str, token: str | None) -> UpResult:
        status = _status(state, self.host.name)
        envstate.update(self.host.name, env.name, token=token, ports=status.ports, container=status.container)
        return UpResult(status, action, token, None, "present")

    # --- the rest of the lifecycle ---------------------------------------------------------------------

    def list_environments(self, all_owners: bool) -> list[EnvStatus]:
        states = self.runtime.list_states()
        return [_status(s, self.host.name) for s in states if all_owners or s.get("owner") == self.owner]

    def find(self, env_name: str) -> EnvStatus | None:
        state = self.runtime.state(self.key(env_name))
        return _status(state, self.host.name) if state else None

    def volumes(self, env_name: str) -> list[str]:
        return [self.runtime.workspace(env_name)]

    def workspace(self, env: EnvProfile) -> str:
        return self.runtime.workspace(env.name)

    def take_down(self, env_name: str, purge: bool) -> Removed:
        removed = Removed(self.traits.down_verb)
        state = self.runtime.state(self.key(env_name))
        if state:
            self.runtime.stop(state)
            removed.items.append(f"jupyter (pid {state.get('pid')})")
        if state or purge:
            gone = self.runtime.remove(self.key(env_name), env_name, purge)
            if purge:
                removed.volumes.extend(gone[1:])
        return removed

    def jupyter_access(self, env_name: str) -> JupyterAccess:
        current = self.find(env_name)
        if current is None or not current.running:
            raise DevenvError(f"Jupyter for '{env_name}' on {self.host.name} is not running",
                              f"start it with `devenv up {self.host.name} --env {env_name}`")
        token = self._token_for(env_name)
        return JupyterAccess(current, token, current.ports["jupyter"])

    def _token_for(self, env_name: str) -> str:
        token = self.runtime.read_token(self.key(env_name))
        if not token:
            raise DevenvError(f"no Jupyter token for '{env_name}' on {self.host.name}",
                              f"restart it: `devenv down {self.host.name}` then `devenv up {self.host.name}`")
        return token

    autostops = True

    def autostop_plan(self, env: EnvProfile, result: UpResult) -> AutostopPlan:
        """The watcher runs beside Jupyter as the same user: sessions are that user's sshd sessions that run
        something in the workspace (not their other logins to the host); stop ends Jupyter's process group
        (state.json stays: the next `up` starts it again), down also removes the environment's folder (the
        workspace stays)."""
        from devenv.env.runs import RUNS_FOLDER
        from devenv.services.environments.autostop import AutostopPlan

        key = self.key(env.name)
        pid = int(result.status.container or 0)
        if pid <= 1:
            raise DevenvError(f"no Jupyter process for '{env.name}' to watch", "run `devenv up` again")
        workspace = self.runtime.workspace(env.name)
        gpus = str(result.status.gpus or "none")
        return AutostopPlan(
            key=key, python=self.host.python, sessions={"kind": "host", "uid": "self", "workspace": workspace},
            gpus=gpus if gpus == "all" or gpus.replace(",", "").isdigit() else "none",
            runs_dir=f"{workspace}/{RUNS_FOLDER}", stop_steps=[{"killpg": pid}],
            down_steps=[{"killpg": pid}, {"argv": ["rm", "-rf", "--", self.runtime.env_dir(key)]}],
            hook_prefix=[], hook_cwd=workspace, jupyter_port=result.status.ports.get("jupyter"),
            token_file=f"{self.runtime.env_dir(key)}/jupyter_token", alive_pid=pid)

    def ssh_target(self, env_name: str) -> SshTarget:
        """The host itself: its own sshd serves the shell (there is no second sshd)."""
        return SshTarget()

    def command_target(self, env_name: str, host_if_no_env: bool = False) -> CommandTarget:
        return CommandTarget(self.conn, self.host.python, f"host python {self.host.python}", self.conn)

    def logs(self, env_name: str, tail: int | str = 200, follow: bool = False) -> Iterator[str]:
        if self.find(env_name) is None:
            raise DevenvError(f"no environment '{env_name}' on {self.host.name}",
                              f"start it: devenv up {self.host.name}")
        return self.runtime.logs(self.key(env_name), tail=tail, follow=follow)

    def run_place(self, env: EnvProfile) -> RunPlace:
        """Runs beside the env's Jupyter, as `devenv exec` runs (its python first on PATH, its GPUs), their
        folder in the workspace. `--then stop` ends the Jupyter's process group; `down` also removes the env's
        folder (the workspace stays), as `devenv down` does."""
        from devenv.env.runs import RUNS_FOLDER

        state = self.runtime.state(self.key(env.name))
        if not state or not state.get("alive") or int(state.get("pid") or 0) <= 1:
            raise DevenvError(f"the environment '{env.name}' on {self.host.name} is not running",
                              f"start it with `devenv up {self.host.name} --env {env.name}`")
        pid = str(int(state["pid"]))
        # $2: the env's folder to remove after (down), relative to $HOME unless absolute; empty for stop
        end = ('kill -s TERM -- -"$1" 2>/dev/null; i=0; while kill -0 "$1" 2>/dev/null && [ $i -lt 100 ]; do '
               'sleep 0.1; i=$((i+1)); done; kill -s KILL -- -"$1" 2>/dev/null; '
               'case $2 in "") ;; /*) rm -rf -- "$2";; *) rm -rf -- "$HOME/$2";; esac')
        folder = self.runtime.env_dir(self.key(env.name))
        folder = folder[2:] if folder.startswith("~/") else folder
        then = {"stop": ["sh", "-c", end, "devenv", pid, ""], "down": ["sh", "-c", end, "devenv", pid, folder]}
        gpus = state.get("gpus", "all")

        def script(text: str, args: list[str]) -> tuple[int, str, str]:   # exec's, without reading the state again
            return exec_output(stream_output(self.conn, self.runtime.exec_line(
                env.name, ["sh", "-c", text, "devenv", *args], gpus=gpus)))

        return RunPlace(f"{self.workspace(env)}/{RUNS_FOLDER}", script, script, then=then)

    def exec(self, env_name: str, argv: list[str]) -> ExecStream:
        """argv on the host, in the workspace, with the environment's GPUs: its output streamed as it comes."""
        return stream_output(self.conn, self._exec_line(env_name, argv))

    def exec_entry(self, env: EnvProfile, argv: list[str], tty: bool = False) -> ExecEntry:
        """The same line, run by the user's ssh to the host: stdin and a terminal are the host's sshd's."""
        return ExecEntry(self._exec_line(env.name, argv), on_host=True)

    def _exec_line(self, env_name: str, argv: list[str]) -> str:
        state = self.runtime.state(self.key(env_name))
        if state is None:
            raise DevenvError(f"no environment '{env_name}' on {self.host.name}",
                              f"start it: devenv up {self.host.name}")
        return self.runtime.exec_line(env_name, argv, gpus=state.get("gpus", "all"))


def _status(state: dict[str, Any], host: str) -> EnvStatus:
    alive = bool(state.get("alive"))
    return EnvStatus(
        host=host, env=state.get("env", "?"), owner=state.get("owner", "?"), runtime="host",
        state="running" if alive else "exited", spec_hash=state.get("spec_hash"), spec=state.get("spec"),
        ports={"jupyter": state["port"]} if alive and state.get("port") else {},
        container=str(state.get("pid")) if state.get("pid") else None, name=f"jupyter {state.get('env', '')}",
        started_at=state.get("started_at", ""), detail="" if alive else "Jupyter is not running",
        gpus=None if state.get("gpus") in (None, "none") else state["gpus"],
    )
