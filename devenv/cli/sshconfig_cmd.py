"""`devenv ssh-config install | uninstall | show`: one Include line in ~/.ssh/config, with the user's consent.

With it, every ssh tool (VS Code Remote-SSH, scp, rsync, plain ssh) reaches `devenv-HOST-ENV` entries (the
env's `-` doubled: see remote.openssh.env_alias).
Nothing else in the user's file is ever changed; `uninstall` takes out exactly that line.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from devenv.cli import main
from devenv.config import paths
from devenv.config import ssh_include as inc
from devenv.errors import NotConfirmed

_MARKER = "ssh-include.json"  # remembers that devenv created the user's file, so uninstall removes it again


def devenv_ssh_config() -> Path:
    from devenv.services.ssh_entry import ssh_files

    return ssh_files()[0]


def user_ssh_config() -> Path:
    """The user's ssh config (a symlink, as dotfile managers make, is followed: the link stays a link)."""
    return paths.ssh_config_path().resolve()


@main.group("ssh-config")
def ssh_config() -> None:
    """Let every ssh tool see devenv's environment entries (one Include line in your ssh config)."""


@ssh_config.command("install")
@click.option("--yes", "-y", "assume_yes", is_flag=True, help="Do not ask.")
def install(assume_yes: bool) -> None:
    """Add `Include <devenv's ssh config>` as the first line of ~/.ssh/config (nothing else changes)."""
    target, line = user_ssh_config(), inc.include_line(devenv_ssh_config())
    text = _read(target)
    if text is not None and inc.has_include(text, line):
        where = "at the top" if inc.is_at_top(text, line) else "below a Host block: ssh applies it only there"
        click.echo(f"{target} already includes devenv's entries ({where}).")
        return
    if not assume_yes:
        if not sys.stdin.isatty():
            raise NotConfirmed(f"adding a line to {target} needs your consent and cannot ask here",
                               "run it with --yes")
        click.echo(f"devenv will add this one line at the top of {target}:\n  {line.rstrip()}")
        if not click.confirm("Add it?", default=False):
            click.echo("Nothing changed.")
            return
    if text is None:
        paths.ensure_private_dir(target.parent)
        paths.write_private(target, line)
        paths.write_private(paths.state_dir() / _MARKER, json.dumps({"created": str(target)}))
    else:
        _write_keeping_mode(target, inc.add_include(text, line))
    click.echo(f"Added to {target}: {line.rstrip()}   (undo: devenv ssh-config uninstall)")


@ssh_config.command("uninstall")
def uninstall() -> None:
    """Take devenv's Include line out of ~/.ssh/config (exactly that line)."""
    target, line = user_ssh_config(), inc.include_line(devenv_ssh_config())
    current = _read(target)
    if current is None or not inc.has_include(current, line):
        click.echo(f"{target} has no devenv Include line: nothing to do.")
        return
    text = inc.remove_include(current, line)
    marker = paths.state_dir() / _MARKER
    created = marker.is_file() and json.loads(marker.read_text()).get("created") == str(target)
    if created and not text:
        target.unlink()
    else:
        _write_keeping_mode(target, text)
    if marker.is_file():
        marker.unlink()
    click.echo(f"Removed from {target}: {line.rstrip()}")


@ssh_config.command("show")
def show() -> None:
    """Print the Include line and whether your ssh config has it."""
    target, line = user_ssh_config(), inc.include_line(devenv_ssh_config())
    text = _read(target) or ""
    state = "installed" if inc.has_include(text, line) else "not installed (devenv ssh-config install)"
    click.echo(f"{line.rstrip()}\n# in {target}: {state}")


def _read(target: Path) -> str | None:
    """The user's ssh config as text (bytes that are not UTF-8 kept as they are), None when there is none."""
    data = paths.read_user_file(target, "the ssh config")
    return None if data is None else data.decode("utf-8", "surrogateescape")


def _write_keeping_mode(path: Path, text: str) -> None:
    mode = path.stat().st_mode & 0o777
    tmp = path.with_name(f".{path.name}.devenv{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(text.encode("utf-8", "surrogateescape"))
    os.replace(tmp, path)
