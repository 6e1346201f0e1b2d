"""`devenv image build HOST`: build the environment's image on HOST, through the Docker API over SSH;
`devenv image prune HOST`: remove devenv's images there that no environment uses."""

from __future__ import annotations

from collections.abc import Callable

import click

from devenv.cli import main
from devenv.cli.common import accept_new_host_option, env_option
from devenv.cli.envcommon import build_input_options
from devenv.cli.progress import ProgressPrinter
from devenv.cli.render import emit_json
from devenv.config import profiles
from devenv.config import validate as check
from devenv.env.image_context import BuildInputs
from devenv.env.info import ProgressEvent
from devenv.errors import BadInput
from devenv.services.session import open_env


@main.group()
def image() -> None:
    """Environment images on hosts."""


@image.command("build")
@click.argument("host")
@env_option
@accept_new_host_option
@build_input_options
@click.option("--quiet", "-q", is_flag=True, help="Print only the steps, not every line of their output.")
def build(host: str, env: str | None, accept_new_host: bool, ca_bundle: str | None, wheelhouse: str | None,
          offline: bool, quiet: bool) -> None:
    """Build the environment's image on HOST from the bundled Dockerfile, with live progress.

    Steps that did not change are reused from the host's build cache. A failing build names its step.
    """
    inputs = BuildInputs.from_options(ca_bundle, wheelhouse, offline)
    printer = ProgressPrinter(verbose=not quiet)
    with open_env(host, env, accept_new_host=accept_new_host, events=printer) as session:
        env_profile = session.env
        if session.kind.builds_images:  # else build_image says there is no image to build, before any work
            extras = [f"CA bundle {inputs.ca_bundle}"] if inputs.ca_bundle else []
            if inputs.wheelhouse:
                extras.append(f"{len(inputs.wheels())} wheels from {inputs.wheelhouse}")
            if inputs.context_dir:
                extras.append(f"build context {inputs.context_dir} (DEVENV_BUILD_CONTEXT)")
            printer.step(f"Building {env_profile.image} on {host}" + (f" with {', '.join(extras)}" if extras else ""))
        info = session.build_image(inputs, printer.progress if not quiet else _steps_only(printer))
    printer.done()
    torch_label = info.labels.get("org.devenv.torch") or "none"
    cuda_label = info.labels.get("org.devenv.cuda") or "none (CPU)"
    click.secho(f"Built {env_profile.image} ({info.id[:19]}, {info.size_bytes / 1e9:.2f} GB) on {host}: "
                f"torch {torch_label}, CUDA {cuda_label}", fg="green")


@image.command("prune")
@click.argument("host")
@click.option("--env", "-e", "only_env", metavar="ENV", callback=lambda ctx, param, value: _env_name(value),
              help="Only the images built for this environment.")
@accept_new_host_option
@click.option("--dry-run", "-n", is_flag=True, help="Say what would be removed, remove nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print what was found and done as JSON.")
def prune(host: str, only_env: str | None, accept_new_host: bool, dry_run: bool, as_json: bool) -> None:
    """Remove devenv's images on HOST that no environment uses.

    Only images devenv built are looked at (never one pulled, built by hand or by another tool). One is kept
    while any container was made from it or an env profile here names its tag; the rest go (old builds a rebuild
    replaced, images of an older devcontainer.json). The engine removes nothing by force.
    """
    printer = ProgressPrinter()
    with open_env(host, None, accept_new_host=accept_new_host, events=printer) as session:
        if not as_json:
            printer.step(f"Looking for devenv's images on {host}" + (f" built for '{only_env}'" if only_env else ""))
        outcome = session.prune_images(only_env, dry_run)
    printer.done()
    if as_json:
        emit_json({"schema_version": 1, "host": host, "env": only_env, "dry_run": dry_run,
                   "images": [i.to_json() for i in outcome.images], "freed_bytes": outcome.freed_bytes})
        return
    for i in outcome.images:
        name = i.tags[0] if i.tags else f"<untagged> {i.id[:19]}"
        verb = {"removed": "removed", "remove": "would remove", "kept": "kept"}[i.action]
        click.echo(f"  {verb:<12} {name}  {i.size_bytes / 1e9:.2f} GB  env '{i.env}': {i.reason}")
    gone = [i for i in outcome.images if i.action in ("removed", "remove")]
    if not outcome.images:
        click.echo(f"No devenv images on {host}" + (f" built for '{only_env}'" if only_env else "") + ".")
    elif dry_run:
        click.echo(f"Dry run: {len(gone)} image(s) would be removed (up to {outcome.freed_bytes / 1e9:.2f} GB); "
                   f"`devenv image prune {host}` removes them.")
    else:
        click.secho(f"Removed {len(gone)} image(s) on {host}, up to {outcome.freed_bytes / 1e9:.2f} GB freed.",
                    fg="green")


def _env_name(value: str | None) -> str | None:
    """--env of prune names a label value, not a profile to load: checked as a name, before dialling."""
    if value is not None and not profiles._NAME_RE.match(value):
        raise BadInput(f"--env {check.preview(value)} is not an environment name",
                       "use letters, digits, '.', '_' and '-' (starting with a letter or digit)")
    return value


def _steps_only(printer: ProgressPrinter) -> Callable[[ProgressEvent], None]:
    def show(event: ProgressEvent) -> None:
        if event.text.startswith("Step "):
            printer.progress(event)
    return show
