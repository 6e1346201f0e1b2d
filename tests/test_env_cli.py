"""The environment commands' input errors (CliRunner, no host needed): one message, a hint, the right exit code."""

from __future__ import annotations

from click.testing import CliRunner

from devenv.cli import main


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def test_unknown_host_is_a_profile_error_for_every_command():
    for command in (["up"], ["down"], ["logs"], ["jupyter"], ["ssh"], ["image", "build"]):
        result = run(*command, "no-such-host")
        assert result.exit_code == 2, (command, result.output)
        assert "unknown host 'no-such-host'" in result.output and "Hint:" in result.output


def test_tunnel_rejects_bad_port_specs_before_connecting():
    result = run("tunnel", "local", "http")
    assert result.exit_code == 2 and "'http' is not PORT or PORT:LOCAL" in result.output
    assert run("tunnel", "local", "70000").exit_code == 2


def test_exec_needs_a_command():
    result = run("exec", "local", "--")
    assert result.exit_code == 2


def test_bad_build_inputs_are_reported_before_any_host_work(tmp_path):
    missing = tmp_path / "nope.pem"
    result = run("image", "build", "local", "--ca-bundle", str(missing))
    assert result.exit_code == 1 and f"CA bundle {missing} does not exist" in result.output


def test_logs_tail_must_be_a_number():
    result = run("logs", "local", "--tail", "lots")
    assert result.exit_code == 2 and "--tail" in result.output
