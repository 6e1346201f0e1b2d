"""`devenv logs HOST [-f]`: the environment's output (Jupyter and sshd), as the host keeps it."""

from __future__ import annotations

import click

from devenv.cli import main
from devenv.cli.common import accept_new_host_option, env_option
from devenv.services.session import open_env


@main.command()
@click.argument("host")
@env_option
@accept_new_host_option
@click.option("--follow", "-f", is_flag=True, help="Keep printing new lines until Ctrl-C.")
@click.option("--tail", "-n", "tail", default="200", show_default=True, metavar="N",
              help="Lines from the end to start with ('all' for everything).")
@click.option("--run", "run_ref", metavar="ID", help="A detached run's output instead (its id or name; see "
                                                     "`devenv runs`), all of it; with -f until it ends.")
def logs(host: str, env: str | None, accept_new_host: bool, follow: bool, tail: str, run_ref: str | None) -> None:
    """Print the environment's log on HOST (with -f, follow it)."""
    if tail != "all" and not (tail.isascii() and tail.isdigit() and len(tail) <= 9):
        raise click.BadParameter("give a number of lines or 'all'", param_hint="--tail")
    if run_ref is not None:
        _run_log(host, env, accept_new_host, run_ref, follow)
        return
    with open_env(host, env, accept_new_host=accept_new_host) as session:
        lines = session.backend.logs(session.env.name, tail=int(tail) if tail != "all" else "all", follow=follow)
        for line in lines:
            click.echo(line)


def _run_log(host: str, env: str | None, accept_new_host: bool, ref: str, follow: bool) -> None:
    """A run's log from its start, read in pieces (never whole); -f follows it to its end, resuming at the
    same byte after a lost connection."""
    import sys

    from devenv.cli.run_cmd import follow_run, runs_of

    with open_env(host, env, accept_new_host=accept_new_host) as session:
        runs = runs_of(session)
        run_id = runs.find(ref).id
        if follow:
            last = follow_run(host, env, accept_new_host, run_id, 0, first=runs)
            if last.state == "lost":   # the log ends here for good: say why rather than end as if it finished
                click.secho(f"Run {run_id} was lost on {host} (its supervisor is gone: a restart?); its log is "
                            "kept", fg="red", err=True)
            return
        offset = 0
        while True:
            piece = runs.read(run_id, offset)
            sys.stdout.buffer.write(piece.data)
            sys.stdout.buffer.flush()
            offset += len(piece.data)
            if not piece.data or offset >= piece.size:
                return
