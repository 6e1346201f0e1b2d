"""The end of a command run over several hosts (cli.common.finish_per_host): check and sanity print a block per
host, image push a line per host; both give a JSON document keyed by host and exit with the most telling code."""

from __future__ import annotations

import json
from typing import Any

import pytest

from devenv.cli.common import EXIT_CONNECT, finish_per_host
from devenv.cli.image_cmd import finish_per_host_push
from devenv.env.image_push import PushResult
from devenv.errors import ConnectError, DevenvError

LOST = ConnectError("cannot reach b-box", "check the network")


def ended(capsys: pytest.CaptureFixture[str], finish: Any, *args: Any, **kwargs: Any) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exited:
        finish(*args, **kwargs)
    return int(exited.value.code or 0), capsys.readouterr().out


def test_check_and_sanity_print_a_block_per_host_with_the_error_and_its_hint(capsys):
    results: list[tuple[str, dict[str, Any] | None, DevenvError | None]] = [
        ("a-box", {"ok": True}, None), ("b-box", None, LOST)]
    code, out = ended(capsys, finish_per_host, results, [0, EXIT_CONNECT], False, lambda r: r,
                      lambda r: print(f"result {r['ok']}"), {"status": "fail", "summary": "1 of 2 hosts failed"})
    assert code == EXIT_CONNECT
    assert out.splitlines() == ["== a-box", "result True", "== b-box", "Error: cannot reach b-box",
                                "Hint: check the network", "Verdict: 1 of 2 hosts failed"]


def test_check_and_sanity_json_is_keyed_by_host_with_the_verdict(capsys):
    results: list[tuple[str, dict[str, Any] | None, DevenvError | None]] = [
        ("a-box", {"ok": True}, None), ("b-box", None, LOST)]
    code, out = ended(capsys, finish_per_host, results, [0, EXIT_CONNECT], True, lambda r: r, print,
                      {"status": "fail", "summary": "s"})
    assert code == EXIT_CONNECT
    assert json.loads(out) == {"schema_version": 1, "hosts": {
        "a-box": {"ok": True},
        "b-box": {"error": "cannot reach b-box", "hint": "check the network", "exit_code": EXIT_CONNECT}},
        "verdict": {"status": "fail", "summary": "s"}}


def test_all_hosts_fine_is_no_exit(capsys):
    finish_per_host([("a-box", {"ok": True}, None)], [0], False, lambda r: r, lambda r: print("fine"))
    assert capsys.readouterr().out == "== a-box\nfine\n"


PUSHED = PushResult("a-box", "pushed", image_id="sha256:0123456789abcdef", bytes_moved=2_000_000, seconds=2.0)
CUT = PushResult("c-box", "failed", bytes_moved=1000, error="the stream was cut", hint="run the push again",
                 exit_code=EXIT_CONNECT)


def test_push_prints_a_line_per_host_naming_it(capsys):
    results = [("a-box", PUSHED, None), ("b-box", None, LOST), ("c-box", CUT, None)]
    code, out = ended(capsys, finish_per_host_push, results, [0, EXIT_CONNECT, EXIT_CONNECT], False, "img:1",
                      "src")
    assert code == EXIT_CONNECT
    assert out.splitlines() == [PUSHED.describe(), "b-box: cannot reach b-box", "  Hint: check the network",
                                CUT.describe(), "  Hint: run the push again"]


def test_push_json_names_the_source_and_image_and_a_failed_host(capsys):
    results = [("a-box", PUSHED, None), ("b-box", None, LOST)]
    code, out = ended(capsys, finish_per_host_push, results, [0, EXIT_CONNECT], True, "img:1", "src")
    assert code == EXIT_CONNECT
    doc = json.loads(out)
    assert list(doc) == ["schema_version", "source", "image", "hosts"]
    assert doc["source"] == "src" and doc["image"] == "img:1"
    assert doc["hosts"] == {"a-box": PUSHED.to_dict(), "b-box": {
        "host": "b-box", "outcome": "failed", "error": "cannot reach b-box", "hint": "check the network",
        "exit_code": EXIT_CONNECT}}
