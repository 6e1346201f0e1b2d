"""The environment commands' input errors (CliRunner, no host needed): one message, a hint, the right exit code."""

from __future__ import annotations

from click.testing import CliRunner

from devenv.cli import main


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def test_a_name_that_is_no_profile_is_an_ssh_destination_for_every_command():
    """No profile named no-such-host: it is tried as `ssh no-such-host` would be (cannot resolve: exit 3);
    a name that cannot be an ssh destination is bad input (exit 2)."""
    for command in (["up"], ["down"], ["logs"], ["jupyter"], ["ssh"], ["image", "build"]):
        result = run(*command, "no-such-host.invalid")
        assert result.exit_code == 3, (command, result.output)
        assert "cannot resolve host name 'no-such-host.invalid'" in result.output and "Hint:" in result.output
        result = run(*command, "no such host")
        assert result.exit_code == 2, (command, result.output)
        assert "neither a host profile nor an ssh destination" in result.output and "Hint:" in result.output


def test_tunnel_rejects_bad_port_specs_before_connecting():
    result = run("tunnel", "local", "http")
    assert result.exit_code == 2 and "'http' is not PORT or LOCAL:PORT" in result.output
    assert run("tunnel", "local", "70000").exit_code == 2
    ssh_form = run("tunnel", "local", "6006:localhost:6006")  # ssh -L's form: the host part has no place here
    assert ssh_form.exit_code == 2 and "LOCAL:PORT, as `ssh -L LOCAL:localhost:PORT`" in ssh_form.output


def test_exec_needs_a_command():
    result = run("exec", "local", "--")
    assert result.exit_code == 2


def test_bad_build_inputs_are_reported_before_any_host_work(tmp_path):
    missing = tmp_path / "nope.pem"
    result = run("image", "build", "local", "--ca-bundle", str(missing))
    assert result.exit_code == 2 and f"CA bundle {missing} does not exist" in result.output  # bad input


def test_logs_tail_must_be_a_number():
    result = run("logs", "local", "--tail", "lots")
    assert result.exit_code == 2 and "--tail" in result.output


def parsed(name: str, *args: str) -> dict:
    import click

    command = main.get_command(click.Context(main), name)
    assert command is not None
    with command.make_context(name, list(args)) as ctx:
        return ctx.params


def test_the_users_command_keeps_its_own_options():
    """COMMAND's words are never devenv's options: click used to take -t (a tty) and -h (help, exit 0) out of
    `ls -th`, and bundle `-oPath=x` into -t and -h the same way."""
    assert parsed("exec", "box", "ls", "-th") == {"host": "box", "env": None, "accept_new_host": False, "tty": False,
                                                  "command": ("ls", "-th")}
    assert parsed("exec", "-t", "box", "top", "-h")["command"] == ("top", "-h")
    assert parsed("exec", "box", "-t", "--", "vim", "-t")["tty"] is True
    assert parsed("exec", "--env", "e", "box", "--", "ls")["command"] in (("ls",), ("--", "ls"))
    assert parsed("ssh", "box", "-N")["command"] in (("-N",), ("--", "-N"))
    result = run("exec", "-oPath=x", "--", "ls")
    assert result.exit_code == 2 and "'-oPath=x' is not an option of `devenv exec`" in result.output
    assert run("ssh", "-oProxyCommand=touch /tmp/x", "box").exit_code == 2
