"""remote/local.py's end of a killed command (a timeout, a closed stream, Ctrl-C): TERM to its process group,
KILL after the grace for what still runs. A zombie runs nothing: it must not hold the group up."""

from __future__ import annotations

import signal
import subprocess

import pytest

from devenv.remote import local


@pytest.fixture
def sent(monkeypatch) -> list[int]:
    """The signals _kill_group sends to the group (0: its question whether the group is still there)."""
    signals: list[int] = []
    real = local._signal_group

    def record(pgid: int, sig: int) -> bool:
        signals.append(sig)
        return real(pgid, sig)

    monkeypatch.setattr(local, "_signal_group", record)
    return signals


def test_a_group_whose_members_are_all_dead_is_done_without_waiting_for_their_reaping(sent):
    """The lock holder of `up` (a shell and its `sleep`) TERMed: the `sleep`, reparented to init, stays a zombie
    until init reaps it, seconds later on some machines, and the group answered signals until then: every `up`
    waited out the 2 s grace and sent a KILL to nothing. Here the zombie's parent is this test, which reaps it
    only at the end; before, the KILL was sent (this test failed)."""
    leader = subprocess.Popen(["sleep", "600"], process_group=0)   # a group of its own, in this session
    member = subprocess.Popen(["sleep", "600"], process_group=leader.pid)
    try:
        local._kill_group(leader)
        assert signal.SIGKILL not in sent, sent
    finally:
        member.kill()
        code = member.wait(30)
    assert leader.returncode == -signal.SIGTERM and code == -signal.SIGTERM, (leader.returncode, code)


def test_a_member_that_ignores_term_is_killed_after_the_grace(sent, monkeypatch):
    monkeypatch.setattr(local, "TERM_GRACE_S", 0.3)
    leader = subprocess.Popen(["sleep", "600"], process_group=0)   # a group of its own, in this session
    stubborn = subprocess.Popen(["sh", "-c", "trap '' TERM; echo ready; exec sleep 600"], process_group=leader.pid,
                                stdout=subprocess.PIPE, text=True)
    try:
        assert stubborn.stdout.readline() == "ready\n"   # type: ignore[union-attr]
        local._kill_group(leader)
    finally:
        stubborn.kill()
        code = stubborn.wait(30)
        stubborn.stdout.close()   # type: ignore[union-attr]
    assert sent[-1] == signal.SIGKILL, sent
    assert code == -signal.SIGKILL
