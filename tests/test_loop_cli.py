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
