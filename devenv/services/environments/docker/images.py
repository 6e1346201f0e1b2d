"""An environment's image on a host (L2): use it if present, else build it there (build: section) or pull it."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import IO, TYPE_CHECKING

from devenv.config.profiles import EnvProfile
from devenv.env import image_context, project_context
from devenv.env.image_context import BuildInputs
from devenv.env.info import ImageInfo, ProgressEvent

if TYPE_CHECKING:
    from devenv.runtimes.docker_runtime import DockerRuntime

Progress = Callable[[ProgressEvent], None]
VENV_STEP = "Step venv"   # "Step ...": the build's steps are what `image build -q` and `up` show


# The default way on an engine that commits as Docker does (DEVENV_BUILD_VENV=commit|copy chooses).
BUILD_BY_COMMIT = True


def builds_venv_by_commit(runtime: DockerRuntime, env: EnvProfile, inputs: BuildInputs) -> bool:
    """The bundled Dockerfile's venv is made by run + commit instead of the classic builder's COPY between
    stages (docs/benchmarks.md: the demo on a fresh machine) where the engine commits as Docker does; podman
    builds the whole Dockerfile. DEVENV_BUILD_VENV=copy builds it the classic way everywhere (a way out),
    DEVENV_BUILD_VENV=commit by run + commit where the engine can."""
    way = os.environ.get("DEVENV_BUILD_VENV", "")
    if not {"commit": True, "copy": False}.get(way, BUILD_BY_COMMIT):
        return False
    return runtime.commit_builds and image_context.is_bundled(env, inputs)


def ensure_image(runtime: DockerRuntime, env: EnvProfile, inputs: BuildInputs, progress: Progress,
                 step: Callable[[str], None] = lambda text: None) -> tuple[ImageInfo, str]:
    """(the image, how it got there: "present" | "built" | "pulled")."""
    info = runtime.image(env.image)
    if info is not None and is_current(info, env):
        return info, "present"
    if env.build is not None:
        if info is not None:
            step(f"{env.image} on {runtime.host} was built without the profile's pip/apt/user as they are now: "
                 "rebuilding it")
        if env.project_build is not None:
            ensure_project_base(runtime, env, progress, step)
        step(f"Building {env.image} on {runtime.host} (first time: several minutes; later builds reuse steps)")
        if inputs.context_dir is not None:
            step(f"Build context: {image_context.context_root(env, inputs)} (DEVENV_BUILD_CONTEXT)")
        return build_image(runtime, env, inputs, progress), "built"
    step(f"Pulling {env.image} on {runtime.host}")
    return runtime.pull(env.image, progress), "pulled"


def is_current(info: ImageInfo, env: EnvProfile) -> bool:
    """The image holds what the profile bakes in now (its pip/apt/user content label matches); a pulled one is
    what it is."""
    return env.build is None or info.labels.get(image_context.CONTENT_LABEL, "") == image_context.content_hash(env)


def ensure_project_base(runtime: DockerRuntime, env: EnvProfile, progress: Progress,
                        step: Callable[[str], None] = lambda text: None) -> ImageInfo:
    """The project's own image (devcontainer.json's build), built from the project folder unless present."""
    build = env.project_build
    assert build is not None
    info = runtime.image(build.tag)
    if info is not None:
        return info
    pc = project_context.of_build(build)
    step(f"Building the project's image {build.tag} from {pc.dockerfile.relative_to(pc.root)} on {runtime.host}")
    step(f"Build context: {pc.context} ({pc.files} files, {pc.size_bytes / 1e6:.1f} MB; inside the project "
         f"folder {pc.root}, .dockerignore honoured, links sent as links)")
    context, dockerfile = project_context.make_tar(pc)
    try:
        return runtime.build(context, dockerfile, build.tag, dict(build.args), progress,
                             labels={"org.devenv.env": env.name, "org.devenv.role": "project-base"},
                             target=build.target)
    finally:
        context.close()


def build_image(runtime: DockerRuntime, env: EnvProfile, inputs: BuildInputs, progress: Progress) -> ImageInfo:
    """Build env.image on the host from the bundled Dockerfile; BuildFailed names the failing step."""
    if env.project_build is not None:
        ensure_project_base(runtime, env, progress)
    context, dockerfile, _size = image_context.make_context(env, inputs)
    labels = {"org.devenv.env": env.name}
    if image_context.content_hash(env):
        labels[image_context.CONTENT_LABEL] = image_context.content_hash(env)
    try:
        if builds_venv_by_commit(runtime, env, inputs):
            return _build_by_commit(runtime, env, inputs, context, dockerfile, labels, progress)
        return runtime.build(context, dockerfile, env.image, image_context.build_args(env, inputs), progress,
                             labels=labels)
    finally:
        context.close()


def _build_by_commit(runtime: DockerRuntime, env: EnvProfile, inputs: BuildInputs, context: IO[bytes],
                     dockerfile: str, labels: dict[str, str], progress: Progress) -> ImageInfo:
    """The bundled Dockerfile's runtime stage built as usual (the layer cache covers it), then the venv made in
    a container of it and committed: the same image as the whole Dockerfile makes, without the classic builder
    copying the ~1 GB venv between stages. The layer cache does not cover a commit, so the image carries a
    fingerprint of what made it (the runtime stage's id, the scripts, the wheels and the build arguments by
    content, the labels) and an unchanged spec reuses it."""
    stage = runtime.build(context, dockerfile, None, image_context.build_args(env, inputs), progress,
                          target=image_context.RUNTIME_STAGE)
    made = image_context.commit_build(env, inputs)
    try:
        key = made.fingerprint(stage.id, labels)
        for stored in runtime.images_labelled(image_context.BUILD_CACHE_LABEL):
            if stored.labels.get(image_context.BUILD_CACHE_LABEL) == key:
                progress(ProgressEvent(f"{VENV_STEP}: the image committed before, unchanged ({stored.id[:19]})"))
                return runtime.tag_image(stored.id, env.image)
        return runtime.build_by_commit(stage.id, made.archive, made.command, env.image,
                                       {**labels, image_context.BUILD_CACHE_LABEL: key}, progress,
                                       f"{VENV_STEP}: install-python.sh and install-extra.sh pip in a container of "
                                       "the runtime stage, then committed")
    finally:
        made.close()
