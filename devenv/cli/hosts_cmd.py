"""`devenv hosts add NAME [--ssh DEST] [--runtime R] [--group G]...`: write a host profile (optional: any ssh
alias or user@host[:port] works without one)."""

from __future__ import annotations

import click

from devenv.cli import main
from devenv.config import hostref, paths, profiles
from devenv.errors import ProfileError


@main.group("hosts")
def hosts_group() -> None:
    """Add host profiles (optional: every command also takes an ssh alias or user@host[:port])."""


@hosts_group.command("add")
@click.argument("name")
@click.option("--ssh", "destination", metavar="DEST", help="ssh alias or user@host[:port] (default: NAME).")
@click.option("--runtime", type=click.Choice(["auto", "docker", "host"]), default="auto", show_default=True,
              help="auto: Docker if the host has it, else the bare host.")
@click.option("--group", "groups", multiple=True, metavar="GROUP", help="Add the host to GROUP (repeatable).")
@click.option("--description", default="", help="One line about the host.")
@click.option("--force", is_flag=True, help="Replace an existing user profile of that name.")
def add(name: str, destination: str | None, runtime: str, groups: tuple[str, ...], description: str,
        force: bool) -> None:
    """Write NAME as a host profile (0600) under your profile folder, validated like every profile."""
    text = hostref.new_profile_text(name, destination, runtime, list(groups), description)
    path = paths.user_profiles_dir() / "hosts" / f"{name}.yaml"
    if path.exists() and not force:
        raise ProfileError(f"{path} already exists", "pass --force to replace it")
    paths.write_private(path, text)
    shadowed = profiles.source_of("hosts", name)
    click.echo(f"Wrote {path}")
    if shadowed is not None and shadowed != path:
        click.echo(f"(it takes precedence over {shadowed})")
    click.echo(f"Next: devenv check {name}")
