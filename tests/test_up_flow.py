"""`up`'s decisions as services/environments/flow.py takes them for every backend, over a backend whose steps
only record that they ran: which steps run, in which order, and where the one question is asked. The steps
themselves are each backend's (tests/test_up_decisions.py holds the docker ones to the same table)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devenv.checks.report import FAIL, PASS, CheckReport, CheckResult
from devenv.config.profiles import EnvProfile, HostProfile
from devenv.env.info import EnvStatus
from devenv.errors import DevenvError
from devenv.services.environments.contract import (
    Existing,
    PreflightFailed,
    QuietEvents,
    Removed,
    Shell,
    Traits,
    UpOptions,
    UpResult,
)
from devenv.services.environments.flow import FlowBackend

HOST = HostProfile(name="flowhost", source="test", local=True, runtime="host")
ENV = EnvProfile(name="py", source="test", image="devenv/test:1")


class Asked(QuietEvents):
    def __init__(self, answer: bool):
        self.answer = answer
        self.questions: list[str] = []

    def confirm(self, question: str, details: list[str]) -> bool:
        self.questions.append(question)
        return self.answer


class Recording(FlowBackend):
    """A backend whose host has `there` (None: nothing) and whose finish can or cannot start it."""

    traits = Traits("a record", down_verb="Dropped")
    shell = Shell.NONE

    def __init__(self, there: Existing | None, check_ok: bool = True, finishes: bool = True):
        self.host, self.there, self.finishes, self.did = HOST, there, finishes, []
        self.check = lambda env: CheckReport(HOST.name, env.name, [CheckResult("x", "x", PASS if check_ok else FAIL,
                                                                                "seen")])

    def _result(self, action: str) -> UpResult:
        return UpResult(EnvStatus(HOST.name, ENV.name, "me", "host", "running"), action, None, None)

    def look(self, env, key, options):
        self.did.append("look")
        return self.there

    def reattach(self, env, found, key, events, options):
        self.did.append("reattach")
        return self._result("reattached")

    def prepare(self, env, found, key, events, options):
        self.did.append("prepare")
        return found

    def finish(self, env, found, key, events, options):
        self.did.append("finish")
        return self._result("started") if self.finishes else None

    def replace_question(self, env, found):
        return "Replace it?", DevenvError("left as it is", "up --yes")

    def remove(self, env, found, events):
        self.did.append("remove")

    def create(self, env, key, action, found, events, options):
        self.did.append("create")
        return self._result(action)

    def take_down(self, env_name: str, purge: bool) -> Removed:
        return Removed(self.traits.down_verb, [env_name])

    def list_environments(self, all_owners: bool) -> list[EnvStatus]:
        return []

    @classmethod
    def open(cls, host, conn, check=None):
        raise NotImplementedError

    @classmethod
    def run_check(cls, conn, host, env, on_result=None):
        raise NotImplementedError

    @classmethod
    def run_preflight(cls, conn, host, env, allow_busy=False):
        raise NotImplementedError

    def find(self, env_name): return None
    def volumes(self, env_name): return []
    def workspace(self, env): return "~/w"
    def logs(self, env_name, tail=200, follow=False) -> Iterator[str]: return iter([])
    def exec(self, env_name, argv): raise NotImplementedError
    def exec_entry(self, env, argv, tty=False): raise NotImplementedError
    def jupyter_access(self, env_name): raise NotImplementedError
    def ssh_target(self, env_name): raise NotImplementedError
    def command_target(self, env_name, host_if_no_env=False): raise NotImplementedError
    def close(self): pass


RUNNING_SAME = Existing("h", running=True, same=True)
STOPPED_SAME = Existing("h", running=False, same=True)
OTHER_SPEC = Existing("h", running=True, same=False, diff=["shm_size: 1g -> 2g"])


@pytest.mark.parametrize("there, finishes, action, steps", [
    (None, True, "created", ["look", "prepare", "create"]),
    (RUNNING_SAME, True, "reattached", ["look", "reattach"]),                 # no check, no prepare
    (STOPPED_SAME, True, "started", ["look", "prepare", "finish"]),
    (STOPPED_SAME, False, "created", ["look", "prepare", "finish", "create"]),  # could not start: made anew
])
def test_each_state_of_the_host_takes_its_steps(there, finishes, action, steps):
    backend = Recording(there, finishes=finishes)
    result = backend.up(ENV, events=Asked(answer=False))
    assert result.action == action and backend.did == steps


def test_another_spec_is_asked_once_and_left_alone_when_refused():
    backend, events = Recording(OTHER_SPEC), Asked(answer=False)
    with pytest.raises(DevenvError, match="left as it is"):
        backend.up(ENV, events=events)
    assert events.questions == ["Replace it?"] and "remove" not in backend.did


@pytest.mark.parametrize("answer, assume_yes, asked", [(True, False, 1), (False, True, 0)])
def test_another_spec_is_replaced_on_yes_or_with_assume_yes(answer, assume_yes, asked):
    backend, events = Recording(OTHER_SPEC), Asked(answer=answer)
    result = backend.up(ENV, events=events, options=UpOptions(assume_yes=assume_yes))
    assert result.action == "recreated" and backend.did == ["look", "prepare", "remove", "create"]
    assert len(events.questions) == asked


def test_a_failed_check_changes_nothing_and_asks_nothing():
    backend, events = Recording(OTHER_SPEC, check_ok=False), Asked(answer=True)
    with pytest.raises(PreflightFailed):
        backend.up(ENV, events=events)
    assert backend.did == ["look"] and events.questions == []


def test_down_says_what_the_backend_took_down_and_forgets_the_environment():
    from devenv.env import state as envstate

    envstate.update(HOST.name, ENV.name, container="c1")
    removed = Recording(None).down(ENV.name)
    assert removed == Removed("Dropped", [ENV.name]) and envstate.load(HOST.name, ENV.name) == {}
