"""The bounded wait for Jupyter (L2, no I/O): ready, stopped early, or timed out with the logs attached."""

from __future__ import annotations

import pytest

from devenv.services import jupyter
from devenv.services.jupyter import NotReady, Probe


def test_returns_once_the_probe_answers():
    answers = iter([Probe(False, "jupyter down: refused"), Probe(True, "jupyter ok")])
    waited = jupyter.wait_ready(lambda: next(answers), lambda: [], host="h", timeout=5, interval=0.01)
    assert waited >= 0 and next(answers, None) is None  # returned on the second probe's answer, asked no third


def test_times_out_with_the_last_probe_and_the_logs():
    with pytest.raises(NotReady) as err:
        jupyter.wait_ready(lambda: Probe(False, "jupyter down: ConnectionRefusedError\nsshd ok: SSH-2.0"),
                           lambda: ["[E] extension failed to load"], host="box", timeout=0.3, interval=0.01)
    message = err.value.message
    assert "did not answer within 0 s" in message or "did not answer within 1 s" in message
    assert "jupyter down: ConnectionRefusedError" in message and "sshd ok" not in message.split("\n")[0]
    assert "| [E] extension failed to load" in message


def test_a_stopped_environment_fails_at_once():
    with pytest.raises(NotReady, match="the container is exited"):
        jupyter.wait_ready(lambda: Probe(False, "", stopped="the container is exited (exit code 1)"),
                           lambda: ["boom"], host="h", timeout=60, interval=0.01)


def test_tokens_are_long_random_and_urls_use_loopback():
    a, b = jupyter.new_token(), jupyter.new_token()
    assert a != b and len(a) == 48
    assert jupyter.lab_url(8890, a) == f"http://127.0.0.1:8890/lab?token={a}"
