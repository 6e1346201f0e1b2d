"""`devenv image prune HOST` on a container engine (L2): devenv's old images go, everything else stays.

devenv's images are the ones it built: they carry the org.devenv.env label (the environment they were built
for). An image without it (pulled, built by hand or by another tool) is never looked at. Of devenv's, one is
kept while any container (running or stopped, devenv's or not) was made from it, or while an env profile on
this laptop names one of its tags (`up` would only build it again); the rest (dangling builds a rebuild
replaced, devcontainer images of an older devcontainer.json, tags no profile names any more) are removed, newest
first so that an image goes before the project base it was built on. The engine removes nothing by force: an
image it refuses (tagged by another name too, a child image, a container made meanwhile) is kept, and its reason
said.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from devenv.env import spec as envspec
from devenv.env.info import StoredImage
from devenv.errors import ConnectError, DevenvError
from devenv.services.environments.contract import ImagePrune, PrunedImage

if TYPE_CHECKING:
    from devenv.runtimes.docker_runtime import DockerRuntime


def prune(runtime: DockerRuntime, keep_tags: set[str], only_env: str | None, dry_run: bool,
          step: Callable[[str], None]) -> ImagePrune:
    ours = [i for i in runtime.images_labelled(envspec.ENV)
            if only_env is None or i.labels.get(envspec.ENV) == only_env]
    used = runtime.images_in_use()
    outcome = ImagePrune(dry_run)
    for image in sorted(ours, key=lambda i: i.created, reverse=True):
        why_kept = _why_kept(image, used, keep_tags)
        if why_kept:
            outcome.images.append(_entry(image, "kept", why_kept))
            continue
        why = "no container uses it" + ("" if image.tags else " (untagged: a later build took its tag)")
        if dry_run:
            outcome.images.append(_entry(image, "remove", why))
            continue
        step(f"Removing {_name(image)} ({image.size_bytes / 1e9:.2f} GB, built for '{_env(image)}')")
        try:
            runtime.remove_image(image.id)
        except ConnectError:
            raise
        except DevenvError as refused:   # the engine's own reason: a new container, a child image, ...
            outcome.images.append(_entry(image, "kept", f"the engine refused: {refused.message}"))
            continue
        outcome.images.append(_entry(image, "removed", why))
    return outcome


def _why_kept(image: StoredImage, used: dict[str, list[str]], keep_tags: set[str]) -> str:
    users = used.get(image.id)
    if users:
        return f"used by container {', '.join(sorted(users)[:3])}" + (" ..." if len(users) > 3 else "")
    named = sorted(t for t in image.tags if _bare(t) in {_bare(k) for k in keep_tags})
    if named:
        return f"an env profile names {named[0]} (`devenv up` would build it again)"
    return ""


def _bare(tag: str) -> str:
    """A tag as a profile writes it: podman lists docker.io/devenv/x:y or localhost/x:y for devenv/x:y, x:y."""
    for prefix in ("docker.io/library/", "docker.io/", "localhost/"):
        if tag.startswith(prefix):
            return tag[len(prefix):]
    return tag


def _entry(image: StoredImage, action: str, reason: str) -> PrunedImage:
    return PrunedImage(image.id, image.tags, image.size_bytes, _env(image), action, reason)


def _env(image: StoredImage) -> str:
    return image.labels.get(envspec.ENV, "")


def _name(image: StoredImage) -> str:
    return image.tags[0] if image.tags else f"untagged image {image.id[:12]}"
