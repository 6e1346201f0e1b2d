"""`up`'s offer to push the image from a fleet host (services.image_offer finds and carries it out; this module
parses the flags and asks): on a terminal a question, --yes pushes without one, --no-push builds instead, and
without a terminal or --yes `up` stops (exit 2) with the push command to run.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from devenv.errors import BadInput

if TYPE_CHECKING:
    from devenv.services.session import EnvSession


def offer_push(host: str, env: str | None, *, accept_new_host: bool, assume_yes: bool, push_from: str | None,
               no_push: bool, known_source: str | None = None, session: EnvSession | None = None) -> bool:
    """Before `up` builds a missing image: push it from a fleet host that has it, when one does (and it is
    wanted). known_source: a host `up @group` already saw has it. Raises when the push failed or could not be
    asked about. True when it pushed."""
    if no_push:
        return False
    from devenv.env.image_push import FAILED, progress_line
    from devenv.services import image_offer
    from devenv.services.image_push import PushFailed

    offer = image_offer.find(host, env, push_from=push_from or known_source, accept_new_host=accept_new_host,
                             session=session)
    if offer is None:
        return False
    lacks = f"{offer.host} lacks the image {offer.image}; {offer.source} has it"
    if not assume_yes:
        if not (sys.stdin.isatty() and sys.stderr.isatty()):
            raise BadInput(f"{lacks}: `up` would build it, but a push from {offer.source} (no registry) is faster; "
                           "there is no terminal to ask",
                           f"push it: `{offer.command()}`, then run up again; or pass --yes to push now, "
                           "--no-push to build it")
        if not click.confirm(f"{lacks}. Copy it from {offer.source} (no registry) instead of building it?",
                             default=True, err=True):
            return False
    click.echo(f"Pushing {offer.image} from {offer.source} to {offer.host} ({offer.command()})", err=True)
    result = image_offer.carry_out(
        offer, accept_new_host=accept_new_host,
        on_progress=lambda h, moved, s, total: click.echo("  " + progress_line(h, moved, s, total), err=True),
        on_note=lambda text: click.echo(text, err=True))
    click.echo(result.describe(), err=True)
    if result.outcome == FAILED:
        raise PushFailed(f"the push from {offer.source} failed: {result.error}",
                         f"{result.hint or 'run it again'}; or `up --no-push` builds the image on {offer.host}")
    return True
