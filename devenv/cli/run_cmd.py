"""`devenv run`, `runs` and `cancel`: detached runs in the environment, which outlive this machine's connection
(services/runs.py; the host keeps their state, output and exit code in the workspace)."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

import click

from devenv.cli import main
from devenv.cli.common import accept_new_host_option, env_option, exit_with_worst, gpus_option, host_names, per_host
from devenv.cli.params import PassThroughCommand
from devenv.cli.render import emit_json
from devenv.env import runs as model
from devenv.errors import BadInput, ConnectError, DevenvError
from devenv.services.session import EnvSession, open_env

if TYPE_CHECKING:
    from devenv.services.runs import LogPiece, Runs

STATE_COLOR = {"running": "green", "starting": "yellow", "killed": "red", "lost": "red"}


def runs_of(session: EnvSession) -> Runs:
    from devenv.services.runs import Runs

    return Runs(session.backend, session.env, session.host.name)


def _write_out(data: bytes) -> None:
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def follow_run(host: str, env: str | None, accept_new_host: bool, run_id: str, offset: int,
               first: Runs | None = None) -> LogPiece:
    """Stream the run's log from offset to its end (a lost connection is taken again at the same offset);
    Ctrl-C leaves the run running and says how to come back."""
    sessions: list[EnvSession] = []

    def reconnect() -> Runs:
        for s in sessions:
            s.close()
        sessions.clear()
        session = open_env(host, env, accept_new_host=accept_new_host).__enter__()  # the pool reconnects
        sessions.append(session)
        return runs_of(session)

    runs = first if first is not None else reconnect()
    try:
        return runs.follow(run_id, offset, _write_out, reconnect=reconnect)
    except KeyboardInterrupt:
        named = f" --env {env}" if env else ""
        click.echo(f"\nThe run {run_id} goes on on {host}: `devenv logs {host}{named} --run {run_id} -f` follows it "
                   f"again, `devenv cancel {host}{named} {run_id}` stops it.", err=True)
        raise
    finally:
        for s in sessions:
            s.close()


@main.command(cls=PassThroughCommand, context_settings={"ignore_unknown_options": True})
@click.argument("host")
@env_option
@accept_new_host_option
@click.option("--name", "name", metavar="NAME", help="A name for the run (shown by `devenv runs`).")
@click.option("--gpus", "gpus", metavar="N|0,1|all|none", callback=gpus_option,
              help="GPUs for the environment when `run` makes it (as `up --gpus`).")
@click.option("--sync", "sync_dir", metavar="DIR", type=click.Path(exists=True, file_okay=False),
              help="Copy the project folder DIR into the workspace first (see `devenv sync`).")
@click.option("--then", "then", type=click.Choice(model.THEN_ACTIONS),
              help="When the run ends: stop the environment (workspace kept) or take it down.")
@click.option("--wait", "wait", is_flag=True, help="Follow the run to its end and exit with its exit code.")
@click.option("--follow/--no-follow", "follow", default=None,
              help="Stream its output (default on a terminal); Ctrl-C leaves it running.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(host: str, env: str | None, accept_new_host: bool, name: str | None, gpus: str | None,
        sync_dir: str | None, then: str | None, wait: bool, follow: bool | None, command: tuple[str, ...]) -> None:
    """Start COMMAND in the environment on HOST (put `--` before it), detached: it goes on when this machine
    disconnects. Prints the run's id; makes the environment first (as `up`) when it is not running.

    `devenv runs HOST` lists runs, `devenv logs HOST --run ID -f` follows one, `devenv cancel HOST ID` stops it.
    COMMAND is passed as it is, without a shell (write `sh -c '...'` for one).
    """
    argv = list(command[1:] if command[:1] == ("--",) else command)
    if not argv:
        raise click.UsageError("give a command after --, e.g. devenv run HOST -- python train.py")
    if name is not None:
        model.check_run_name(name)
    if follow is None:
        follow = sys.stdout.isatty() and not wait
    with open_env(host, env, accept_new_host=accept_new_host) as session:
        session.use_gpus(gpus)
        try:   # the running environment's place at once (no separate lookup first: one round trip less)
            runs = runs_of(session)
            needs_up = False
        except (BadInput, ConnectError):
            raise
        except DevenvError:   # not running (or not there): made first, as `up` makes it
            needs_up = True
        if needs_up or sync_dir:
            _up_first(session, host, env, accept_new_host, sync_dir, needs_up)
            if needs_up:
                runs = runs_of(session)
        run_id = runs.start(argv, name=name, then=then, gpus=gpus, following=wait or follow)
        click.echo(run_id)
        if not (wait or follow):
            return
        click.echo(f"Following run {run_id} (Ctrl-C leaves it running)", err=True)
        last = follow_run(host, env, accept_new_host, run_id, 0, first=runs)
    if wait:
        _exit_with(run_id, last, host)


def _up_first(session: EnvSession, host: str, env: str | None, accept_new_host: bool, sync_dir: str | None,
              needs_up: bool) -> None:
    from devenv.cli.progress import ProgressPrinter

    if needs_up:
        events = ProgressPrinter()
        session.events = events
        result = session.up()
        events.done()
        click.echo(f"Environment '{session.env.name}' on {host} {result.action} in {result.elapsed_s:.1f} s",
                   err=True)
    if sync_dir:
        from devenv.cli.sync_cmd import sync_after_up

        sync_after_up(host, session.env.name, accept_new_host, sync_dir)


def _exit_with(run_id: str, last: LogPiece, host: str) -> None:
    if last.state == "lost":
        click.secho(f"Run {run_id} was lost on {host} (its supervisor is gone: a restart?); its log is kept",
                    fg="red", err=True)
        raise SystemExit(1)
    if last.state == "killed":
        click.secho(f"Run {run_id} was cancelled (exit {last.exit_code})", fg="yellow", err=True)
    raise SystemExit(last.exit_code if last.exit_code is not None else 1)


@main.command()
@click.argument("hosts", nargs=-1, required=True)
@env_option
@accept_new_host_option
@click.option("--json", "as_json", is_flag=True, help="Print the runs as JSON.")
@click.option("--prune", is_flag=True, help="Remove the runs that ended (their logs too) first.")
def runs(hosts: tuple[str, ...], env: str | None, accept_new_host: bool, as_json: bool, prune: bool) -> None:
    """Detached runs of the environment on HOSTs (or an @group): id, name, command, state (running, exited N,
    killed, lost), started, duration, GPUs. Finished runs are kept until --prune."""
    names = host_names(hosts)

    def one(name: str) -> tuple[str, list[model.Run], int]:
        with open_env(name, env, accept_new_host=accept_new_host) as session:
            found = runs_of(session)
            pruned = found.prune() if prune else 0
            return session.env.name, found.list(), pruned

    results = per_host(names, one)
    now = time.time()
    if as_json:
        emit_json({"schema_version": 1, "hosts": {
            name: ({"env": done[0], "runs": [r.to_json(now) for r in done[1]], "pruned": done[2]}
                   if done is not None else {"error": err.message if err else "?", "hint": err.hint if err else None,
                                             "exit_code": err.exit_code if err else 70})
            for name, done, err in results}})
    else:
        header = f"{'HOST':<14} {'ID':<13} {'NAME':<14} {'STATE':<11} {'STARTED':<20} {'TIME':<8} {'GPUS':<6} COMMAND"
        click.echo(click.style(header, bold=True))
        for name, done, err in results:
            if done is None:
                click.secho(f"{name:<14} error: {err.message if err else '?'}", fg="red")
                if err and err.hint:
                    click.secho(f"{'':<14} hint: {err.hint}", fg="yellow")
                continue
            if done[2]:
                click.echo(f"{name:<14} pruned {done[2]} finished run(s)")
            for r in done[1]:
                started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.started)) if r.started else "-"
                state = click.style(f"{r.state:<11}", fg=STATE_COLOR.get(r.phase,
                                                                          "red" if r.exit_code else None))
                click.echo(f"{name:<14} {r.id:<13} {(r.name or '-')[:14]:<14} {state} {started:<20} "
                           f"{model.format_duration(r.duration(now)):<8} {(r.gpus or '-'):<6} {r.command[:60]}")
    exit_with_worst([err.exit_code for _, _, err in results if err is not None])


@main.command()
@click.argument("host")
@click.argument("run_id", metavar="ID")
@env_option
@accept_new_host_option
@click.option("--grace", type=click.IntRange(0, 3600), default=model.CANCEL_GRACE_S, show_default=True,
              help="Seconds between SIGTERM and SIGKILL.")
def cancel(host: str, run_id: str, env: str | None, accept_new_host: bool, grace: int) -> None:
    """Stop the run ID on HOST: SIGTERM to its whole process tree, SIGKILL after --grace seconds."""
    with open_env(host, env, accept_new_host=accept_new_host) as session:
        found = runs_of(session)
        target = found.find(run_id)
        before, killed = found.cancel(target.id, grace)
        if before not in ("running", "starting"):
            click.echo(f"Run {target.id} had already ended ({target.state})")
            return
        after = found.find(target.id)
    how = "SIGKILL after the grace period" if killed else "SIGTERM"
    click.echo(f"Cancelled run {target.id} ({how}): {after.state}")
