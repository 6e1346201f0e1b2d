"""`up`'s offer of an image push (L2): the host lacks the environment's image and a host of its fleet (a host of
one of its groups, or the one named by --push-from) has it: copying it there (services.image_push) spares the
build. This module finds the offer and carries it out; asking the user is the CLI's (cli.up_push).
"""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from devenv.config import hostref
from devenv.env.image_push import FAILED, PushResult
from devenv.errors import BadInput, DevenvError
from devenv.services import fleet, image_push
from devenv.services.session import EnvSession, open_env


@dataclass(frozen=True)
class PushOffer:
    host: str      # lacks the image
    source: str    # has it
    env: str
    image: str

    def command(self) -> str:
        """The push, as the user would type it."""
        return shlex.join(["devenv", "image", "push", self.source, self.host, "--env", self.env])


def find(host: str, env_name: str | None, *, push_from: str | None = None, accept_new_host: bool = False,
         bound_s: float = fleet.ANSWER_BOUND_S, session: EnvSession | None = None) -> PushOffer | None:
    """The offer for `up host`: None when the host has the image (or runs no images) or no fleet host has it.
    push_from: the source to use (BadInput when it has no such image); else the first group member that has it.
    session: `up`'s own session on host (its engine is asked through the backend `up` then uses: on a host whose
    docker socket is known, an API call of a few ms instead of a command in a login shell there)."""
    candidates = [push_from] if push_from else _fleet_of(host)
    if not candidates:
        return None
    try:
        with _on(host, env_name, accept_new_host, session) as here:
            if not here.kind.builds_images:
                if push_from:
                    raise BadInput(f"--push-from: {host}'s environments run from no image", "leave --push-from out")
                return None
            env, image = here.env.name, here.env.image
            if here.backend.has_image(image):
                return None
    except DevenvError:
        if push_from:
            raise
        # the host's engine cannot be asked (no access, not running, host away): no offer; up's own check says
        # why, with its remedy (test_a_login_without_docker_access_stops_up failed on this message before)
        return None

    def has_it(name: str) -> bool:
        try:
            with open_env(name, env, accept_new_host=accept_new_host) as session:
                if not session.kind.builds_images:
                    return False
                return image_push.inspect(image_push.engine_host(session, image)).image_id is not None
        except DevenvError:
            if push_from:
                raise
            return False   # an unreachable or engine-less fleet host has nothing to offer

    if push_from:
        if not has_it(push_from):
            raise BadInput(f"--push-from {push_from}: it has no image {image}",
                           f"name a host that has it (`devenv image push` copies it from there), or leave "
                           f"--push-from out so that `up` builds it on {host}")
        return PushOffer(host, push_from, env, image)
    answers = fleet.bounded(candidates, has_it, lambda name: False, bound_s)
    source = next((name for name, has in zip(candidates, answers, strict=True) if has), None)
    return PushOffer(host, source, env, image) if source else None


@contextlib.contextmanager
def _on(host: str, env_name: str | None, accept_new_host: bool, session: EnvSession | None) -> Iterator[EnvSession]:
    """The session given (left open: its owner goes on with it), else one of its own on host."""
    if session is not None:
        yield session
        return
    with open_env(host, env_name, accept_new_host=accept_new_host) as own:
        yield own


def _fleet_of(host: str) -> list[str]:
    """The other hosts of the host's groups, in group order (none for a host without a profile or groups)."""
    try:
        profile = hostref.load_host(host)
    except DevenvError:
        return []
    members: list[str] = []
    for group in profile.groups:
        with contextlib.suppress(DevenvError):
            members += [m for m in hostref.group_members(hostref.GROUP_PREFIX + group)
                        if m != host and m not in members]
    return members


def carry_out(offer: PushOffer, *, accept_new_host: bool = False,
              on_progress: image_push.ProgressFn | None = None,
              on_note: Callable[[str], None] | None = None) -> PushResult:
    """The push the offer names; its PushResult (FAILED: said, with a hint)."""
    with contextlib.ExitStack() as stack:
        src = stack.enter_context(open_env(offer.source, offer.env, accept_new_host=accept_new_host))
        dest = stack.enter_context(open_env(offer.host, offer.env, accept_new_host=accept_new_host))
        try:
            source, target = image_push.engine_host(src, offer.image), image_push.engine_host(dest, offer.image)
            return image_push.push(source, [target], parallel=1, on_progress=on_progress, on_note=on_note)[0]
        except DevenvError as e:
            return PushResult(offer.host, FAILED, error=e.message, hint=e.hint, exit_code=e.exit_code)
