"""`devenv image build HOST`: build the environment's image on HOST, through the Docker API over SSH;
`devenv image prune HOST`: remove devenv's images there that no environment uses."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

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

if TYPE_CHECKING:
    from devenv.env.image_push import PushResult
    from devenv.errors import DevenvError


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


@image.command("push")
@click.argument("source")
@click.argument("dests", nargs=-1, required=True)
@env_option
@accept_new_host_option
@click.option("--parallel", "-j", type=click.IntRange(1, 32), default=4, show_default=True,
              help="Destinations streamed to at once.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document (docs/json.md).")
def push(source: str, dests: tuple[str, ...], env: str | None, accept_new_host: bool, parallel: int,
         as_json: bool) -> None:
    """Copy the environment's image from SOURCE to DESTS (hosts or @groups) without a registry.

    The source engine's `save` streams through this machine into each destination engine's `load` (docker or
    podman at either end); hosts that have an image of the same id are skipped; a broken stream loads nothing.
    """
    from devenv.cli.common import host_names, per_host
    from devenv.env.image_push import progress_line
    from devenv.errors import BadInput
    from devenv.services import image_push

    names = [n for n in host_names(dests) if n != source]
    if not names:
        raise BadInput(f"no destination other than {source}", "name the hosts (or @group) to copy the image to")
    with contextlib.ExitStack() as stack:
        src_session = stack.enter_context(open_env(source, env, accept_new_host=accept_new_host))
        image_name = src_session.env.image
        src = image_push.engine_host(src_session, image_name)
        opening = threading.Lock()

        def dest_side(name: str) -> image_push.EngineHost:
            with opening:
                session = stack.enter_context(open_env(name, src_session.env.name, accept_new_host=accept_new_host))
            return image_push.engine_host(session, image_name)

        def progress(host: str, moved: int, seconds: float, total: int | None) -> None:
            click.echo("  " + progress_line(host, moved, seconds, total), err=True)

        sides = per_host(names, dest_side)
        reachable = [side for _, side, _ in sides if side is not None]
        pushed = {r.host: r for r in image_push.push(src, reachable, parallel=parallel, on_progress=progress,
                                                     on_note=lambda text: click.echo(text, err=True))}
    results = [(name, pushed.get(name), err) for name, _, err in sides]
    codes = [r.exit_code if r is not None else (err.exit_code if err else 0) for _, r, err in results]
    finish_per_host_push(results, codes, as_json, image_name, source)


def finish_per_host_push(results: list[tuple[str, PushResult | None, DevenvError | None]], codes: list[int],
                         as_json: bool, image_name: str, source: str) -> None:
    """push's end (cli.common.finish_per_host): a line per host; in JSON, the source and image, and a host that
    could not be reached as a failed push."""
    from devenv.cli.common import error_fields, finish_per_host

    def print_one(r: PushResult) -> None:
        click.secho(r.describe(), fg={"pushed": "green", "skipped": None}.get(r.outcome, "red"))
        if r.hint and r.outcome == "failed":
            click.secho(f"  Hint: {r.hint}", fg="yellow")

    finish_per_host(results, codes, as_json, lambda r: r.to_dict(), print_one,
                    fields={"source": source, "image": image_name}, one_line=True,
                    error_dict=lambda name, err: {"host": name, "outcome": "failed", **error_fields(err)})
