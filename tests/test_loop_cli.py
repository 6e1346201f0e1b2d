"""CLI paths of the daily loop that need no host: a taken local port is refused before anything connects."""

from __future__ import annotations

import socket
import subprocess

import pytest
from click.testing import CliRunner

from devenv.cli import main


@pytest.fixture
def busy_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def test_jupyter_with_a_taken_port_is_refused_with_a_hint(busy_port):
    result = CliRunner().invoke(main, ["jupyter", "no-such-host-xyz", "-p", str(busy_port)])
    assert result.exit_code == 6, result.output
    assert f"local port {busy_port} (--port) is already in use" in result.output
    assert "leave it out to get a free port" in result.output


def test_tunnel_with_a_taken_local_port_is_a_port_clash(busy_port):
    # LOCAL:PORT as ssh -L: the taken local port is the first number; a clash has its own exit code (6), not 2/3
    result = CliRunner().invoke(main, ["tunnel", "no-such-host-xyz", f"{busy_port}:6006"])
    assert result.exit_code == 6 and f"local port {busy_port} (LOCAL) is already in use" in result.output, \
        result.output
    # the environment's port second: a taken number there is not checked here (it is the host's)
    from devenv.remote.tunnels import free_port

    other = CliRunner().invoke(main, ["tunnel", "no-such-host.invalid", f"{free_port()}:{busy_port}"])
    assert other.exit_code == 3 and "cannot resolve host name" in other.output, other.output


@pytest.fixture
def port_in_time_wait():
    """A local port whose last connection is in TIME_WAIT and on which nothing listens: what a port is for a
    minute after a tunnel through it closed (the side that closes first keeps the TIME_WAIT)."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as ssh's forwards and devenv's bind
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    served, _ = listener.accept()
    served.close()          # the listening side closes first: 127.0.0.1:port goes to TIME_WAIT
    assert client.recv(1) == b""
    client.close()
    listener.close()
    states = subprocess.run(["ss", "-Htan", "state", "time-wait", f"( sport = :{port} )"],
                            capture_output=True, text=True, check=True).stdout
    assert f"127.0.0.1:{port}" in states, "the fixture made no TIME_WAIT"
    return port


def test_a_port_in_time_wait_is_free_as_for_ssh(port_in_time_wait):
    from devenv.remote.tunnels import port_is_free

    assert port_is_free(port_in_time_wait)
    # named with -p it is used, not refused: the command goes on to the host (here: a name that cannot resolve)
    result = CliRunner().invoke(main, ["jupyter", "no-such-host.invalid", "-p", str(port_in_time_wait)])
    assert result.exit_code == 3 and "already in use" not in result.output, result.output


def test_a_forward_whose_port_is_taken_after_it_was_chosen_is_a_port_clash(busy_port):
    from devenv.errors import PortTaken
    from devenv.remote.base import Connection
    from devenv.remote.tunnels import Forward, ParamikoTunnel

    with pytest.raises(PortTaken) as raised:
        ParamikoTunnel(Connection.__new__(Connection), [Forward("port 6006", "10.0.0.2", 6006, busy_port)])
    assert raised.value.exit_code == 6 and f"local port {busy_port}" in raised.value.message


def test_no_color_takes_the_colour_out_of_output_and_errors(monkeypatch, tmp_path):
    monkeypatch.setenv("DEVENV_HOME", str(tmp_path))
    coloured = CliRunner().invoke(main, ["compat", "--driver", "535.104.05", "--cuda", "12.8"], color=True)
    assert "\x1b[" in coloured.output
    monkeypatch.setenv("NO_COLOR", "1")
    plain = CliRunner().invoke(main, ["compat", "--driver", "535.104.05", "--cuda", "12.8"], color=True)
    assert "\x1b[" not in plain.output and plain.exit_code == coloured.exit_code
    error = CliRunner().invoke(main, ["jupyter", "no-such-host-xyz", "-p", "1"], color=True)
    assert error.exit_code != 0 and "Error:" in error.output and "\x1b[" not in error.output


def test_completion_scripts_and_names(monkeypatch, tmp_path):
    monkeypatch.setenv("DEVENV_HOME", str(tmp_path))
    (tmp_path / "profiles" / "hosts").mkdir(parents=True)
    (tmp_path / "profiles" / "hosts" / "gpu7.yaml").write_text("ssh:\n  alias: gpu7\ngroups: [lab]\n")
    for shell, marker in (("bash", "complete -o"), ("zsh", "compdef"), ("fish", "complete --no-files")):
        out = CliRunner().invoke(main, ["completion", shell])
        assert out.exit_code == 0 and marker in out.output and "_DEVENV_COMPLETE" in out.output

    def complete(words: str) -> list[str]:
        env = {"_DEVENV_COMPLETE": "bash_complete", "COMP_WORDS": words, "COMP_CWORD": str(len(words.split(" ")) - 1)}
        result = CliRunner().invoke(main, [], env=env, prog_name="devenv")
        return [line.split(",", 1)[1] for line in result.output.splitlines() if "," in line]

    assert "gpu7" in complete("devenv up gp")
    assert "@lab" in complete("devenv status @")
    assert "cuda" in complete("devenv up gpu7 --env cu")
    assert "gpu7" in complete("devenv sync gp")


@pytest.mark.parametrize("spelling", ["env", "envs"])
def test_kind_is_host_or_env_in_every_command_and_the_old_plural_still_works(tmp_path, spelling):
    profile = tmp_path / "mine.yaml"
    profile.write_text("image: x/y:1\ngpus: all\n")
    validated = CliRunner().invoke(main, ["profiles", "validate", str(profile), "--kind", spelling])
    assert validated.exit_code == 0, validated.output
    shown = CliRunner().invoke(main, ["profiles", "show", "cuda", "--kind", spelling])
    assert shown.exit_code == 0, shown.output
    helped = CliRunner().invoke(main, ["profiles", "validate", "--help"]).output
    assert "host|env" in helped and "hosts" not in helped
