"""`devenv hosts add NAME [--ssh DEST] [--runtime R] [--group G]... [--env ENV]`, `hosts list`, `hosts rm NAME`:
host profiles (optional: any ssh alias or user@host[:port] works without one)."""

from __future__ import annotations

from typing import Any

import click

from devenv.cli import main
from devenv.config import hostref, paths, profiles
from devenv.errors import ProfileError


@main.group("hosts")
def hosts_group() -> None:
    """Add, list and remove host profiles (optional: every command also takes an ssh alias or user@host[:port])."""


@hosts_group.command("add")
@click.argument("name")
@click.option("--ssh", "destination", metavar="DEST", help="ssh alias or user@host[:port] (default: NAME).")
@click.option("--runtime", type=click.Choice(["auto", "docker", "host"]), default="auto", show_default=True,
              help="auto: Docker if the host has it, else the bare host.")
@click.option("--group", "groups", multiple=True, metavar="GROUP", help="Add the host to GROUP (repeatable).")
@click.option("--description", default="", help="One line about the host.")
@click.option("--env", "default_env", metavar="ENV", help="The host's default environment (e.g. cpu, cuda).")
@click.option("--force", is_flag=True, help="Replace an existing user profile of that name.")
def add(name: str, destination: str | None, runtime: str, groups: tuple[str, ...], description: str,
        default_env: str | None, force: bool) -> None:
    """Write NAME as a host profile (0600) under your profile folder, validated like every profile."""
    text = hostref.new_profile_text(name, destination, runtime, list(groups), description, default_env)
    path = paths.user_profiles_dir() / "hosts" / f"{name}.yaml"
    if path.exists() and not force:
        raise ProfileError(f"{path} already exists", "pass --force to replace it")
    paths.write_private(path, text)
    shadowed = profiles.source_of("hosts", name)
    click.echo(f"Wrote {path}")
    if shadowed is not None and shadowed != path:
        click.echo(f"(it takes precedence over {shadowed})")
    click.echo(f"Next: devenv check {name}")


@hosts_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the hosts as JSON.")
def list_hosts(as_json: bool) -> None:
    """Host profiles: yours, then the bundled ones (examples, asked only when named)."""
    rows: list[dict[str, Any]] = []
    for name in profiles.names("hosts"):
        try:
            host = profiles.load_host(name)
        except ProfileError as exc:
            rows.append({"name": name, "error": exc.message})
            continue
        ssh = host.ssh
        dest = "this machine" if host.local or ssh is None else (
            ssh.alias or f"{ssh.user + '@' if ssh.user else ''}{ssh.hostname}{':' + str(ssh.port) if ssh.port else ''}")
        rows.append({"name": name, "ssh": dest, "runtime": host.runtime.value,
                     "default_env": host.default_env, "groups": list(host.groups),
                     "example": hostref.is_example(host), "source": host.source})
    if as_json:
        import json

        click.echo(json.dumps({"schema_version": 1, "hosts": rows}))
        return
    if not rows:
        click.echo("No host profiles. Any ssh alias or user@host[:port] works as a host; "
                   "`devenv hosts add NAME --ssh DEST` writes one.")
        return
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        if "error" in r:
            click.echo(f"{r['name']:<{width}}  (broken: {r['error']})")
            continue
        extra = (f"  groups {','.join(r['groups'])}" if r["groups"] else "") + ("  (example)" if r["example"] else "")
        click.echo(f"{r['name']:<{width}}  {r['ssh']}  runtime {r['runtime']}  env {r['default_env']}{extra}")


@hosts_group.command("rm")
@click.argument("name")
def remove(name: str) -> None:
    """Delete your host profile NAME (bundled ones cannot be deleted; the host itself is not touched)."""
    if not profiles._NAME_RE.match(name or ""):
        raise ProfileError(f"'{name}' is not a valid host profile name", "see `devenv hosts list`")
    mine = paths.user_profiles_dir() / "hosts"
    path = next((p for p in (mine / f"{name}.yaml", mine / f"{name}.yml") if p.is_file()), None)
    if path is None:
        where = profiles.source_of("hosts", name)
        if where is not None:
            raise ProfileError(f"'{name}' is a bundled profile ({where}), not yours", "nothing to remove")
        import difflib

        close = difflib.get_close_matches(name, profiles.names("hosts"), n=1)
        raise ProfileError(f"no host profile '{name}'",
                           f"did you mean '{close[0]}'?" if close else "see `devenv hosts list`")
    path.unlink()
    click.echo(f"Removed {path}")
    shadowed = profiles.source_of("hosts", name)
    if shadowed is not None:
        click.echo(f"(the bundled {shadowed} is used for '{name}' again)")
