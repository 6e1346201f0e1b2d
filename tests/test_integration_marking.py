"""`-m integration` means "needs the test host or root", found from what a test uses (tests/integration_marking.py):
these check the walk on small functions of their own, in-process, and the net under it (SSHD refuses to start in a
test not so marked)."""

from __future__ import annotations

import pytest
import sshd_fixture
from integration_marking import NeedsFinder
from monitor_helpers import replay_sshd
from sshd_fixture import SSHD, free_port, make_key

import testhost


def starts_a_replay_sshd(tmp_path):
    return replay_sshd(tmp_path, make_key(tmp_path / "k"))


def helper_two_calls_deep(tmp_path):
    return starts_a_replay_sshd(tmp_path)


def imports_its_helper_in_its_body(tmp_path):
    from monitor_helpers import replay_sshd as local_name
    return local_name(tmp_path, None)


def through_the_module(tmp_path):
    return sshd_fixture.SSHD(tmp_path, authorized_keys=[])


def in_a_nested_function(tmp_path):
    return lambda: SSHD(tmp_path, authorized_keys=[])


def reads_the_test_host():
    return testhost.testhost_dir() / "env"


def only_a_port_and_a_key(tmp_path):
    return free_port(), make_key(tmp_path / "k")


class UsesAnSshdInAMethod:
    def start(self, tmp_path):
        return helper_two_calls_deep(tmp_path)


def recursive(n):
    return recursive(n - 1) if n else 0


@pytest.mark.parametrize("function", [starts_a_replay_sshd, helper_two_calls_deep, imports_its_helper_in_its_body,
                                      through_the_module, in_a_nested_function, UsesAnSshdInAMethod])
def test_what_reaches_a_private_sshd_needs_root(function):
    assert NeedsFinder().needs_of_function(function) == {"root"}


@pytest.mark.parametrize("function", [reads_the_test_host])  # a parameter: named here, the test would need it
def test_what_reads_the_test_host_needs_it(function):
    assert NeedsFinder().needs_of_function(function) == {"test host"}


@pytest.mark.parametrize("function", [only_a_port_and_a_key, recursive])
def test_a_port_a_key_or_a_cycle_need_nothing(function):
    assert NeedsFinder().needs_of_function(function) == frozenset()


def test_this_module_runs_in_process(request):
    """It names SSHD and the test host's helpers, yet none of its tests calls them: none is marked integration."""
    assert request.node.get_closest_marker("integration") is None


def test_an_sshd_started_by_a_test_not_marked_integration_is_refused_with_the_reason(tmp_path, monkeypatch):
    server = getattr(sshd_fixture, "SSHD")(tmp_path, authorized_keys=[])  # noqa: B009  (out of the walk's sight)
    monkeypatch.setattr(sshd_fixture, "ROOT_ALLOWED", False)
    with pytest.raises(RuntimeError, match="needs root.*not marked integration"):
        server.start()
    assert server.proc is None, "nothing was started"
