"""CLI paths of the daily loop that need no host: a taken local port is refused before anything connects."""

from __future__ import annotations

import socket

import pytest
from click.testing import CliRunner

from devenv.cli import main


@pytest.fixture
def busy_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def test_jupyter_with_a_taken_port_is_bad_input_with_a_hint(busy_port):
    result = CliRunner().invoke(main, ["jupyter", "no-such-host-xyz", "-p", str(busy_port)])
    assert result.exit_code == 2, result.output
    assert f"local port {busy_port} (--port) is already in use" in result.output
    assert "leave it out to get a free port" in result.output


def test_tunnel_with_a_taken_local_port_is_bad_input(busy_port):
    result = CliRunner().invoke(main, ["tunnel", "no-such-host-xyz", f"6006:{busy_port}"])
    assert result.exit_code == 2 and "already in use" in result.output, result.output
