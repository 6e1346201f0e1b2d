"""What the environment commands (up, down, status, logs, exec, image, jupyter, tunnel) share: options and
the presentation of access and tunnels. The work itself is the session's (services.session.open_env)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any, NoReturn, TypeVar

import click

from devenv.config.profiles import EnvProfile
from devenv.env.info import EnvStatus
from devenv.services import jupyter
from devenv.services.background_tunnels import TunnelRecord
from devenv.services.environments.contract import Shell
from devenv.services.session import EnvSession, Tunnel

_F = TypeVar("_F", bound=Callable[..., Any])


def build_input_options(fn: _F) -> _F:
    """--ca-bundle / --wheelhouse / --offline for commands that may build an image."""
    fn = click.option("--offline", is_flag=True,
                      help="pip uses only the wheelhouse (hosts without internet).")(fn)
    fn = click.option("--wheelhouse", metavar="DIR",
                      help="Folder of wheels sent with the build (default: $DEVENV_WHEELHOUSE).")(fn)
    fn = click.option("--ca-bundle", metavar="PEM",
                      help="Extra CA bundle for hosts behind TLS-inspecting proxies "
                           "(default: $DEVENV_BUILD_CA_BUNDLE).")(fn)
    return fn


def print_access(session: EnvSession, env: EnvProfile, status: EnvStatus, token: str | None, *,
                 detach: bool, jupyter_url: str | None = None) -> None:
    """How to reach the environment: URL (when its port is reachable from here), ssh, logs, stop."""
    host = session.host
    env_flag = f" --env {env.name}" if env.name != host.default_env else ""
    label = click.style
    if env.jupyter:
        if jupyter_url is None and host.local and "jupyter" in status.ports and token:
            jupyter_url = jupyter.lab_url(status.ports["jupyter"], token)
        if jupyter_url:
            click.echo(f"  {label('Jupyter', bold=True)}  {jupyter_url}")
        else:
            click.echo(f"  {label('Jupyter', bold=True)}  devenv jupyter {host.name}{env_flag}   "
                       f"(opens a tunnel and prints the URL with its token)")
    shell = session.kind.shell
    if shell is Shell.HOST:
        click.echo(f"  {label('Shell', bold=True)}    devenv ssh {host.name}   "
                   f"(the host itself: runtime {host.runtime})")
    elif env.sshd and shell is Shell.OWN_SSHD:
        click.echo(f"  {label('Shell', bold=True)}    devenv ssh {host.name}{env_flag}")
    click.echo(f"  {label('Logs', bold=True)}     devenv logs {host.name}{env_flag} -f")
    click.echo(f"  {label('Stop', bold=True)}     devenv down {host.name}{env_flag}   "
               f"(keeps the workspace; --purge deletes it)")
    if not host.local and detach:
        click.echo(f"  Running detached: no tunnels held; `devenv tunnel {host.name} PORT` forwards a port.")


@contextlib.contextmanager
def tunnel_shown() -> Iterator[None]:
    """From the moment the URL is printed, Ctrl-C, SIGTERM or SIGHUP close the tunnel and end with 0, as hold()
    does once it holds it: also when the signal comes before hold() took over (a `kill` right after the URL, while
    the tunnel's loop is still being set up), which used to end the command as an interrupted `up` (130/143)."""
    try:
        yield
    except KeyboardInterrupt:
        click.echo("Tunnels closed.", err=True)


def hold(tunnel: Tunnel, host_name: str, reopen: Callable[[list[Any]], Tunnel],
         moved: Callable[[list[Any]], bool] | None = None, record: TunnelRecord | None = None) -> None:
    """Keep the tunnel open until Ctrl-C (exit 0), reopening it on the same local ports whenever its link dies
    or (moved) what it reached restarted elsewhere (services.held_tunnel: a status line each try); an error only
    when what it reached ended for good. record: a background holder's, kept up to date, removed at the end."""
    import signal
    import time

    from devenv.services import background_tunnels
    from devenv.services.held_tunnel import HeldTunnel

    def interrupted(signum: int, frame: FrameType | None) -> NoReturn:
        raise KeyboardInterrupt

    # SIGTERM/SIGHUP (a closed terminal, a supervisor) close the tunnel as Ctrl-C does.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupted)
    via = {"openssh": "OpenSSH", "relay": "a relay in the job"}.get(tunnel.kind, "devenv's SSH connection")
    click.echo(f"Tunnels open through {via}. Ctrl-C closes them; the environment keeps running; "
               "a dropped link is reconnected.", err=True)
    held: list[HeldTunnel] = []

    def say(line: str) -> None:
        click.echo(f"[{time.strftime('%H:%M:%S')}] {line}", err=True)
        if record is not None and held:
            if record.state != held[0].state:
                record.state, record.since = held[0].state, time.time()
            record.reconnects = held[0].reconnects
            background_tunnels.write(record)

    held.append(HeldTunnel(host_name, tunnel, reopen, say, moved=moved))
    if record is not None:
        record.state, record.since = "open", time.time()
        background_tunnels.write(record)
    try:
        held[0].hold()
    except KeyboardInterrupt:
        click.echo("Tunnels closed.", err=True)
    finally:
        if record is not None:
            background_tunnels.remove(record.id)
