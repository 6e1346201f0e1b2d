"""`up @group` (L2): the host of the group to make the environment on, by looking at every host at once (its
GPUs, and whether it has the environment's image), the pure choice (gpu.placement), and the memory of that choice
(a re-`up @group` returns to the host it chose: env.state.placed_on).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from devenv.config import hostref
from devenv.errors import DevenvError
from devenv.gpu import fleet as fleet_model
from devenv.gpu.placement import Candidate, Placement, gpus_needed, place
from devenv.services import fleet, image_push
from devenv.services.session import open_env, resolve_env


@dataclass(frozen=True)
class GroupChoice:
    host: str
    placement: Placement | None       # None: returned to the remembered host (nothing was looked at)
    remembered: bool = False
    image_from: str | None = None     # a reachable host that has the image the chosen one lacks (for a push)


def choose_host(group: str, env_name: str | None, gpus: str | None, *, accept_new_host: bool = False,
                bound_s: float = fleet.ANSWER_BOUND_S) -> GroupChoice:
    """The group's host for the environment: the remembered one, else the best fit (NoHostFits: none fits)."""
    from devenv.env import state

    group = hostref.GROUP_PREFIX + group.removeprefix(hostref.GROUP_PREFIX)
    members = hostref.group_members(group)
    env = resolve_env(hostref.load_host(members[0]), env_name)
    remembered = state.placed_on(group, env.name)
    if remembered in members:
        return GroupChoice(remembered, None, remembered=True)
    need = gpus_needed(gpus if gpus is not None else env.gpus)

    def one(name: str) -> Candidate:
        with contextlib.ExitStack() as stack:
            try:
                session = stack.enter_context(open_env(name, env.name, accept_new_host=accept_new_host))
                look = fleet.look_host(name, session.conn, timeout=bound_s)
                if look.state == fleet_model.DOWN:
                    return Candidate(look, None, session.env.image)
                has_image = None
                if session.kind.builds_images:
                    side = image_push.engine_host(session, session.env.image)
                    has_image = image_push.inspect(side).image_id is not None
                return Candidate(look, has_image, session.env.image)
            except DevenvError as e:
                return Candidate(fleet_model.down(name, e.message, e.hint), None, env.image)

    late = fleet.too_late(bound_s)
    candidates = fleet.bounded(members, one, lambda name: Candidate(late(name), None, env.image), bound_s)
    chosen = place(group, candidates, need)
    best = next(c for c in candidates if c.host == chosen.host)
    image_from = None
    if best.has_image is False:
        image_from = next((c.host for c in candidates if c.has_image and c.look.state != fleet_model.DOWN), None)
    return GroupChoice(chosen.host, chosen, image_from=image_from)


def remember(group: str, env_name: str, host: str) -> None:
    """After `up` made or reattached env on host: the next `up @group` returns there."""
    from devenv.env import state

    state.remember_placement(hostref.GROUP_PREFIX + group.removeprefix(hostref.GROUP_PREFIX), env_name, host)
