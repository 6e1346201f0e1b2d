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
from typing import TYPE_CHECKING

from devenv.env import state as envstate
from devenv.env.info import EnvStatus
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
    envstate.forget(backend.host.name, env_name)
    return removed


def status(backend: EnvironmentBackend, all_owners: bool) -> list[EnvStatus]:
    return backend.list_environments(all_owners)
