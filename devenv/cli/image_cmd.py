"""`devenv image build HOST`: build the environment's image on HOST, through the Docker API over SSH."""

from __future__ import annotations

from collections.abc import Callable

import click

from devenv.cli import main
from devenv.cli.common import accept_new_host_option, env_option
from devenv.cli.envcommon import build_input_options
from devenv.cli.progress import ProgressPrinter
from devenv.env.image_context import BuildInputs
from devenv.env.info import ProgressEvent
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


def _steps_only(printer: ProgressPrinter) -> Callable[[ProgressEvent], None]:
    def show(event: ProgressEvent) -> None:
        if event.text.startswith("Step "):
            printer.progress(event)
    return show
