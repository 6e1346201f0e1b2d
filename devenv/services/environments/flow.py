"""`up`, `down` and `status` decided once, for every backend (L2): the backend supplies the steps.

`up` (docs/environments.md, "What `up` decides"), from what the host reports, never from the laptop's cache:
  nothing there                     -> check, prepare (image, python), create, wait
  running, same spec                -> reattach: no check; a service that died inside it is repaired
  half-made or stopped, same spec   -> check, prepare, finish it (or, when it cannot start, make it anew)
  any state, different spec         -> check, prepare, show the diff; on confirmation replace it (workspace kept)
The question is asked here and nowhere else; `--yes` answers it. `down` forgets what this laptop kept of the
environment once the backend took it down; `status` is what the host reports.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from devenv.env import state as envstate
from devenv.env.info import EnvStatus
from devenv.errors import DevenvError
from devenv.services.environments.contract import (
    EnvironmentBackend,
    Events,
    QuietEvents,
    Removed,
    UpOptions,
    UpResult,
    preflight,
)

if TYPE_CHECKING:
    from devenv.config.autostop import Autostop
    from devenv.config.profiles import EnvProfile
    from devenv.remote.envkey import EnvKey


class FlowBackend(EnvironmentBackend):
    """An EnvironmentBackend whose `up`, `down` and `status` are this module's decisions over its steps: what
    every backend subclasses, so that none decides on its own."""

    def up(self, env: EnvProfile, key: EnvKey | None = None, *, events: Events | None = None,
           options: UpOptions | None = None) -> UpResult:
        return up(self, env, key, events or QuietEvents(), options or UpOptions())

    def down(self, env_name: str, purge: bool = False) -> Removed:
        return down(self, env_name, purge)

    def status(self, all_owners: bool = True) -> list[EnvStatus]:
        return status(self, all_owners)

    def arm_autostop(self, env: EnvProfile, result: UpResult, setting: Autostop | None,
                     disarm: bool = False) -> str | None:
        return arm_autostop(self, env, result, setting, disarm)

    def autostop_states(self) -> dict[str, dict[str, Any]]:
        conn = getattr(self, "conn", None)
        if not self.autostops or conn is None:
            return {}
        from devenv.services.environments import autostop

        return autostop.read_states(conn)


def up(backend: EnvironmentBackend, env: EnvProfile, key: EnvKey | None, events: Events,
       options: UpOptions) -> UpResult:
    started = time.monotonic()
    found = backend.look(env, key, options)
    if found is not None and found.running and found.same:   # the fast path: no check, no image work
        return _timed(backend.reattach(env, found, key, events, options), started)
    preflight(backend.check, backend.host, env, events)
    found = backend.prepare(env, found, key, events, options)
    action = "created"
    if found is not None and found.same:
        if found.running:   # the same after all (an image rebuilt back to what it runs)
            return _timed(backend.reattach(env, found, key, events, options), started)
        finished = backend.finish(env, found, key, events, options)
        if finished is not None:
            return _timed(finished, started)
        found = None        # it could not start as it was (and is gone): made anew
    elif found is not None:
        question, refusal = backend.replace_question(env, found)
        if not (options.assume_yes or events.confirm(question, found.diff)):
            raise refusal
        backend.remove(env, found, events)
        action = "recreated"
    return _timed(backend.create(env, key, action, found, events, options), started)


def _timed(result: UpResult, started: float) -> UpResult:
    result.elapsed_s = time.monotonic() - started
    return result


def down(backend: EnvironmentBackend, env_name: str, purge: bool) -> Removed:
    removed = backend.take_down(env_name, purge)
    conn = getattr(backend, "conn", None)
    if backend.autostops and conn is not None:   # its watcher ends with it
        from devenv.env.spec import owner
        from devenv.services.environments import autostop

        autostop.disarm(conn, f"{owner()}-{env_name}")
    envstate.forget(backend.host.name, env_name)
    return removed


def status(backend: EnvironmentBackend, all_owners: bool) -> list[EnvStatus]:
    """What the host reports, each environment with its autostop watcher's state (one more round trip, only
    where the backend autostops and has environments)."""
    rows = backend.list_environments(all_owners)
    states = backend.autostop_states() if rows else {}
    if states:
        from devenv.services.environments import autostop

        for row in rows:
            found = states.get(f"{row.owner}-{row.env}")
            if found is not None:
                row.autostop = autostop.summary(found, row.running)
    return rows


def arm_autostop(backend: EnvironmentBackend, env: EnvProfile, result: UpResult, setting: Autostop | None,
                 disarm: bool) -> str | None:
    """After `up`, within its lock: the watcher (re)started with setting, or ended with disarm; None leaves a
    running watcher as it is (an `up` that only reattaches keeps what an earlier `up --autostop` armed)."""
    from devenv.env.spec import owner
    from devenv.services.environments import autostop

    conn = getattr(backend, "conn", None)
    if disarm:
        if backend.autostops and conn is not None and autostop.disarm(conn, f"{owner()}-{env.name}"):
            return "autostop turned off"
        return None
    if setting is None:
        return None
    plan = backend.autostop_plan(env, result)
    if conn is None:
        raise DevenvError("internal: autostop needs the host's connection", "report this bug")
    autostop.arm(conn, plan, setting, owner(), env.name)
    from devenv.config.autostop import describe_window

    return (f"autostop: {setting.action} after {describe_window(setting.idle_s)} idle (no session, run, busy "
            f"kernel or busy GPU; sampled every {setting.sample_s:g} s)")
