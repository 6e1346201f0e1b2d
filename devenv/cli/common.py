"""Options and steps every host command shares: environment choice, host-key acceptance, connecting."""

from __future__ import annotations

import os

import click

from devenv.config import profiles
from devenv.config.profiles import EnvProfile, HostProfile
from devenv.remote.base import Connection

env_option = click.option(
    "--env", "-e", "env", metavar="ENV",
    help="Environment profile (default: $DEVENV_ENV, else the host profile's default_env).",
)
accept_new_host_option = click.option(
    "--accept-new-host", is_flag=True,
    help="Trust and record the host key of a host not yet in known_hosts (a changed key is always refused).",
)


def resolve_env(host: HostProfile, flag: str | None) -> EnvProfile:
    """Merge order: host profile's default_env < $DEVENV_ENV < --env."""
    return profiles.load_env(flag or os.environ.get("DEVENV_ENV") or host.default_env)


def connect(host: HostProfile, accept_new_host: bool = False) -> Connection:
    from devenv.remote.pool import get_connection

    return get_connection(host, accept_new_host=accept_new_host)
