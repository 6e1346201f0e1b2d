"""`devenv profiles list | show NAME | validate [FILE]`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click
import yaml

from devenv.cli import main
from devenv.cli.render import emit_json
from devenv.config import profiles
from devenv.errors import ProfileError


@main.group("profiles")
def profiles_group() -> None:
    """List, show and validate host and environment profiles."""


@profiles_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_profiles(as_json: bool) -> None:
    """List host and environment profiles, and where each comes from."""
    rows = []
    for kind in profiles.KINDS:
        for name in profiles.names(kind):
            source = profiles.source_of(kind, name)
            origin = "user" if _is_user(source) else "bundled"
            if origin == "bundled" and kind == "hosts" and _is_example(name):
                origin = "example"
            rows.append({"kind": kind[:-1], "name": name, "origin": origin, "source": str(source)})
    if as_json:
        emit_json(rows)
        return
    for row in rows:
        click.echo(f"{row['kind']:<5} {row['name']:<20} {row['origin']:<8} {row['source']}")


if TYPE_CHECKING:  # generic in the click mypy reads; a plain class at run time in click 8.1 (pyproject allows it)
    _StrChoice = click.Choice[str]
else:
    _StrChoice = click.Choice


class KindChoice(_StrChoice):
    """host | env, one spelling everywhere; the plural (hosts | envs) is still taken, unlisted."""

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> str:
        if isinstance(value, str) and value in ("hosts", "envs"):
            value = value[:-1]
        return super().convert(value, param, ctx)


KIND = KindChoice(["host", "env"])


@profiles_group.command("show")
@click.argument("name")
@click.option("--kind", type=KIND, help="Which kind, when a host and an env share a name.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def show(name: str, kind: str | None, as_json: bool) -> None:
    """Show one profile as devenv reads it (defaults filled in)."""
    kinds = [kind + "s"] if kind else [k for k in profiles.KINDS if profiles.source_of(k, name)]
    if not kinds:
        profiles.load_host(name)  # raises the unknown-name error with the list of known hosts
    loaded = profiles.load_host(name) if kinds[0] == "hosts" else profiles.load_env(name)
    data = loaded.to_dict()
    if as_json:
        emit_json(data)
    else:
        click.echo(yaml.safe_dump(_plain(data), sort_keys=False).rstrip())


@profiles_group.command("validate")
@click.argument("files", nargs=-1, type=click.Path(path_type=Path))
@click.option("--kind", type=KIND, help="Kind of FILES when their folder does not say.")
def validate(files: tuple[Path, ...], kind: str | None) -> None:
    """Validate FILES, or every bundled and user profile when none is given."""
    kind = kind + "s" if kind else None
    targets = list(files) or [
        source for k in profiles.KINDS for n in profiles.names(k) if (source := profiles.source_of(k, n)) is not None
    ]
    failures = errors = 0
    for path in targets:
        try:
            parsed = profiles.validate_file(Path(path), kind)
            if isinstance(parsed, profiles.EnvProfile) and parsed.build is not None:
                _check_dockerfile(parsed)
            click.echo(f"ok    {path}")
        except ProfileError as exc:
            failures += 1
            # every error of the file, each with its file:line, not only the first
            for one in getattr(exc, "errors", None) or [exc]:
                errors += 1
                click.secho(f"error {one.message}", fg="red", err=True)
                if one.hint:
                    click.secho(f"      hint: {one.hint}", fg="yellow", err=True)
    if failures:
        raise ProfileError(f"{errors} error(s) in {failures} of {len(targets)} profile(s)", "fix the errors above")


def _check_dockerfile(env: profiles.EnvProfile) -> None:
    """What `up` refuses when it builds: a build.dockerfile that is missing or outside the folders a build may
    send (images/, or $DEVENV_BUILD_CONTEXT); a ProfileError, as for the file's own errors."""
    from devenv.env.image_context import BuildInputs, dockerfile_path

    dockerfile_path(env, BuildInputs.from_options(None, None))


def _is_user(source: Path | None) -> bool:
    from devenv.config import paths

    return source is not None and paths.user_profiles_dir() in source.parents


def _plain(value: object) -> object:
    """Tuples to lists, so YAML output stays plain."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _is_example(name: str) -> bool:
    from devenv.config import hostref

    try:
        return hostref.is_example(profiles.load_host(name))
    except ProfileError:
        return False
