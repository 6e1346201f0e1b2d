"""`devenv exec HOST -- CMD...`: run a command inside the environment; its output and exit code are yours."""

from __future__ import annotations

import sys

import click

from devenv.cli import main
from devenv.cli.common import EXIT_FAILED, accept_new_host_option, env_option, exit_with_worst, host_names, per_host
from devenv.cli.params import PassThroughCommand
from devenv.services.session import open_env


@main.command(cls=PassThroughCommand, context_settings={"ignore_unknown_options": True})
@click.argument("host")
@env_option
@accept_new_host_option
@click.option("-t", "--tty", "tty", is_flag=True, help="Give the command a terminal (pty): editors, REPLs, top.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def exec(host: str, env: str | None, accept_new_host: bool, tty: bool,  # noqa: A001
         command: tuple[str, ...]) -> None:
    """Run COMMAND in the environment on HOST (put `--` before it), streaming its output.

    Piped stdin (`echo hi | devenv exec HOST -- cat`) reaches the command; -t gives it a terminal. Both go
    through your OpenSSH: to the environment's own sshd (as `devenv ssh` does), or to the host (the bare host,
    a cluster's login node).

    Exits with the command's exit code (3 when the host cannot be reached). HOST may be an @group: the
    command runs on every host in parallel, each host's output is printed under its name, and the exit code
    is 0 only when it succeeded everywhere.
    """
    argv = list(command[1:] if command[:1] == ("--",) else command)
    if not argv:
        raise click.UsageError("give a command after --, e.g. devenv exec HOST -- nvidia-smi")
    if host.startswith("@"):
        _exec_group(host_names([host]), env, accept_new_host, argv)
        return
    from devenv.cli.exec_ssh import exec_over_ssh, stdin_has_input

    if tty or stdin_has_input():
        exec_over_ssh(host, env, accept_new_host, argv, tty)  # exits, unless the environment is right here
    with open_env(host, env, accept_new_host=accept_new_host) as session:
        chunks, exit_code = session.backend.exec(session.env.name, argv)
        for out, err in chunks:
            if out:
                sys.stdout.buffer.write(out)
                sys.stdout.buffer.flush()
            if err:
                sys.stderr.buffer.write(err)
                sys.stderr.buffer.flush()
        code = exit_code()
    raise SystemExit(code)


def _exec_group(names: list[str], env: str | None, accept_new_host: bool, argv: list[str]) -> None:
    def one(name: str) -> tuple[bytes, bytes, int]:
        out, err = bytearray(), bytearray()
        with open_env(name, env, accept_new_host=accept_new_host) as session:
            chunks, exit_code = session.backend.exec(session.env.name, argv)
            for o, e in chunks:
                out += o or b""
                err += e or b""
            return bytes(out), bytes(err), exit_code()

    results = per_host(names, one)
    codes = []
    for name, done, error in results:
        click.secho(f"== {name}", bold=True)
        if done is not None:
            out, err, code = done
            sys.stdout.buffer.write(out)
            sys.stdout.flush()
            sys.stderr.buffer.write(err)
            sys.stderr.flush()
            codes.append(EXIT_FAILED if code else 0)
            if code:
                click.secho(f"{name}: exit code {code}", fg="red", err=True)
        elif error is not None:
            click.secho(f"Error: {error.message}", fg="red", err=True)
            if error.hint:
                click.secho(f"Hint: {error.hint}", fg="yellow", err=True)
            codes.append(error.exit_code)
    exit_with_worst(codes)
