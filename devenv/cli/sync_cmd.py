"""`devenv sync HOST [LOCAL_DIR]`: the project into the environment's workspace with rsync, and outputs back.

Sent: LOCAL_DIR's files, except what its .gitignore files ignore, into WORKSPACE/NAME (NAME: the folder's
name, or --to). Nothing there is deleted unless --delete. --watch sends again whenever a file here changes
(mtimes polled: no extra dependency). --pull PATH brings WORKSPACE/NAME/PATH back into LOCAL_DIR/PATH.
"""

from __future__ import annotations

import time
from pathlib import Path

import click

from devenv.cli import main
from devenv.cli.common import accept_new_host_option, env_option
from devenv.config import validate
from devenv.errors import BadInputError


@main.command()
@click.argument("host")
@click.argument("local_dir", required=False, default=".", type=click.Path(file_okay=False, path_type=Path))
@env_option
@accept_new_host_option
@click.option("--to", "subdir", metavar="NAME", help="Folder in the workspace (default: LOCAL_DIR's name).")
@click.option("--delete", is_flag=True, help="Also delete there what was deleted here (gitignored files are kept).")
@click.option("--watch", "-w", is_flag=True, help="Keep syncing while you edit, until Ctrl-C.")
@click.option("--interval", type=click.FloatRange(0.2, 60), default=1.0, show_default=True,
              help="Seconds between looks for changes with --watch.")
@click.option("--pull", "pull", metavar="PATH", help="Bring WORKSPACE/NAME/PATH back into LOCAL_DIR/PATH instead.")
def sync(host: str, local_dir: Path, env: str | None, accept_new_host: bool, subdir: str | None, delete: bool,
         watch: bool, interval: float, pull: str | None) -> None:
    """Copy LOCAL_DIR (default: here) into the environment's workspace on HOST over its ssh entry (rsync)."""
    from devenv.cli.env_entry import env_target
    from devenv.remote import rsync

    problem = validate.local_path_problem(str(local_dir))
    if problem:
        raise BadInputError(f"LOCAL_DIR {validate.preview(str(local_dir))} {problem}", "name the project folder")
    local_dir = local_dir.resolve()
    if not pull and not local_dir.is_dir():
        raise BadInputError(f"{local_dir} is not a folder", "name the project folder to send")
    name = rsync.check_subdir(subdir or local_dir.name, "--to")
    if pull and (watch or delete):
        raise BadInputError("--pull brings files back once; --watch and --delete are for sending",
                            "run `devenv sync HOST --pull PATH` on its own")
    binary = rsync.rsync_binary()
    _, _, target = env_target(host, env, accept_new_host)
    if pull:
        path = rsync.check_subdir(pull, "--pull")
        into = local_dir / path
        into.mkdir(parents=True, exist_ok=True)
        rsync.run(rsync.pull_argv(target, f"{name}/{path}", into, binary))
        click.echo(f"Pulled {target.remote(f'{name}/{path}')} -> {into}")
        return
    argv = rsync.push_argv(local_dir, target, name, delete, binary)
    started = time.monotonic()
    before = rsync.tree_state(local_dir)  # taken before sending: an edit during the first copy is sent next
    rsync.run(argv)
    click.echo(f"Synced {local_dir} -> {target.remote(name)} ({time.monotonic() - started:.1f} s)")
    if watch:
        _watch(local_dir, argv, interval, target.remote(name), before)


def sync_after_up(host: str, env: str | None, accept_new_host: bool, local_dir: str) -> None:
    """`up --sync DIR`: the first copy, once the environment answers (told on stderr: stdout may be JSON)."""
    from devenv.cli.env_entry import env_target
    from devenv.remote import rsync

    folder = Path(local_dir).resolve()
    if not folder.is_dir():
        raise BadInputError(f"--sync {local_dir}: not a folder", "name the project folder to send")
    binary = rsync.rsync_binary()
    name = rsync.check_subdir(folder.name, "--sync")
    _, _, target = env_target(host, env, accept_new_host)
    rsync.run(rsync.push_argv(folder, target, name, False, binary))
    click.echo(f"Synced {folder} -> {target.remote(name)}", err=True)


def _watch(local_dir: Path, argv: list[str], interval: float, where: str, last: dict) -> None:
    from devenv.remote import rsync

    click.echo(f"Watching {local_dir} (every {interval:g} s); Ctrl-C stops.", err=True)
    try:
        while True:
            time.sleep(interval)
            now = rsync.tree_state(local_dir)
            if now == last:
                continue
            changed = sum(1 for k in now.keys() | last.keys() if now.get(k) != last.get(k))
            rsync.run(argv)
            last = now
            click.echo(f"{time.strftime('%H:%M:%S')} synced {changed} change(s) -> {where}")
    except KeyboardInterrupt:
        click.echo("Stopped watching.", err=True)
