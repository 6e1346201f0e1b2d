"""`devenv sync HOST [LOCAL_DIR]`: the project into the environment's workspace with rsync, and outputs back.

Sent: LOCAL_DIR's files as git sees them (tracked, and untracked ones no ignore rule hides; never .git/), into
WORKSPACE/NAME (NAME: the folder's name, or --to); -v lists what was left here. Nothing there is deleted unless
--delete. --watch sends again whenever a file that is sent changes (mtimes polled: no extra dependency), and
reports only what it sent. --pull PATH brings WORKSPACE/NAME/PATH back into LOCAL_DIR/PATH.
"""

from __future__ import annotations

import time
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

import click

from devenv.cli import main
from devenv.cli.common import accept_new_host_option, env_option
from devenv.config import validate
from devenv.errors import BadInputError

if TYPE_CHECKING:
    from devenv.remote.gitignore import Selection
    from devenv.remote.rsync import Target


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
@click.option("--verbose", "-v", is_flag=True, help="Also list what was left here (what git ignores, and .git/).")
def sync(host: str, local_dir: Path, env: str | None, accept_new_host: bool, subdir: str | None, delete: bool,
         watch: bool, interval: float, pull: str | None, verbose: bool) -> None:
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
        rsync.pull(target, f"{name}/{path}", into, binary)
        click.echo(f"Pulled {target.remote(f'{name}/{path}')} -> {into}")
        return
    started = time.monotonic()
    selection = rsync.push(local_dir, target, name, delete, binary)
    # what was sent, as it was when chosen: an edit during the first copy differs from it and is sent next
    before = rsync.tree_state(local_dir, selection)
    click.echo(f"Synced {local_dir} -> {target.remote(name)} ({time.monotonic() - started:.1f} s)")
    if verbose:
        _say_skipped(selection)
    if watch:
        _watch(local_dir, target, name, delete, binary, interval, before, verbose)


def _say_skipped(selection: Selection) -> None:
    if not selection.skipped:
        click.echo(f"Skipped nothing ({selection.by} ignores nothing here).", err=True)
        return
    click.echo(f"Skipped ({selection.by}: not sent): {', '.join(map(_shown, selection.skipped))}", err=True)


def _shown(name: str) -> str:
    """A file name as a terminal may show it: control characters escaped."""
    return name.encode("unicode_escape").decode("ascii") if validate.text_problem(name) else name


def sync_after_up(host: str, env: str | None, accept_new_host: bool, local_dir: str) -> str:
    """`up --sync DIR`: the first copy, once the environment answers (told on stderr: stdout may be JSON);
    returns the folder it is in there (WORKSPACE/NAME)."""
    from devenv.cli.env_entry import env_target
    from devenv.remote import rsync

    folder = Path(local_dir).resolve()
    if not folder.is_dir():
        raise BadInputError(f"--sync {local_dir}: not a folder", "name the project folder to send")
    binary = rsync.rsync_binary()
    name = rsync.check_subdir(folder.name, "--sync")
    _, _, target = env_target(host, env, accept_new_host)
    rsync.push(folder, target, name, False, binary)
    click.echo(f"Synced {folder} -> {target.remote(name)}", err=True)
    return str(PurePosixPath(target.workspace) / name)


def _watch(local_dir: Path, target: Target, name: str, delete: bool, binary: str, interval: float,
           last: dict[str, tuple[int, int]],
           verbose: bool) -> None:
    from devenv.remote import gitignore, rsync

    where = target.remote(name)
    click.echo(f"Watching {local_dir} (every {interval:g} s); Ctrl-C stops.", err=True)
    try:
        while True:
            time.sleep(interval)
            now = rsync.tree_state(local_dir, gitignore.select(local_dir))
            changed = [k for k in now if now[k] != last.get(k)]
            removed = [k for k in last if k not in now] if delete else []  # sent as deletions only with --delete
            if not changed and not removed:
                last = now
                continue
            selection = rsync.push(local_dir, target, name, delete, binary)
            last = now
            what = f"{len(changed)} change(s)" + (f", {len(removed)} deletion(s)" if removed else "")
            named = [_shown(n) for n in sorted(changed + removed)]
            names = ", ".join(named[:5]) + (f" and {len(named) - 5} more" if len(named) > 5 else "")
            click.echo(f"{time.strftime('%H:%M:%S')} synced {what} ({names}) -> {where}")
            if verbose:
                _say_skipped(selection)
    except KeyboardInterrupt:
        click.echo("Stopped watching.", err=True)
