"""An environment's image on a host (L2): use it if present, else build it there (build: section) or pull it."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from devenv.config.profiles import EnvProfile
from devenv.env import image_context
from devenv.env.image_context import BuildInputs
from devenv.env.info import ImageInfo, ProgressEvent

if TYPE_CHECKING:
    from devenv.runtimes.docker_runtime import DockerRuntime

Progress = Callable[[ProgressEvent], None]


def ensure_image(runtime: DockerRuntime, env: EnvProfile, inputs: BuildInputs, progress: Progress,
                 step: Callable[[str], None] = lambda text: None) -> tuple[ImageInfo, str]:
    """(the image, how it got there: "present" | "built" | "pulled")."""
    info = runtime.image(env.image)
    if info is not None:
        return info, "present"
    if env.build is not None:
        step(f"Building {env.image} on {runtime.host} (first time: several minutes; later builds reuse steps)")
        if inputs.context_dir is not None:
            step(f"Build context: {image_context.context_root(env, inputs)} (DEVENV_BUILD_CONTEXT)")
        return build_image(runtime, env, inputs, progress), "built"
    step(f"Pulling {env.image} on {runtime.host}")
    return runtime.pull(env.image, progress), "pulled"


def build_image(runtime: DockerRuntime, env: EnvProfile, inputs: BuildInputs, progress: Progress) -> ImageInfo:
    """Build env.image on the host from the bundled Dockerfile; BuildFailed names the failing step."""
    context, dockerfile, _size = image_context.make_context(env, inputs)
    try:
        return runtime.build(context, dockerfile, env.image, image_context.build_args(env, inputs), progress,
                             labels={"org.devenv.env": env.name})
    finally:
        context.close()
