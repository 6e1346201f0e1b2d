"""What the environment commands (up, down, status, logs, exec, image) share: options, setup, access text."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import click

from devenv.config.profiles import EnvProfile, HostProfile
from devenv.env.info import EnvStatus
from devenv.remote.base import Connection
from devenv.services import jupyter


def build_input_options(fn):
    """--ca-bundle / --wheelhouse / --offline for commands that may build an image."""
    fn = click.option("--offline", is_flag=True,
                      help="pip uses only the wheelhouse (hosts without internet).")(fn)
    fn = click.option("--wheelhouse", metavar="DIR",
                      help="Folder of wheels sent with the build (default: $DEVENV_WHEELHOUSE).")(fn)
    fn = click.option("--ca-bundle", metavar="PEM",
                      help="Extra CA bundle for hosts behind TLS-inspecting proxies "
                           "(default: $DEVENV_BUILD_CA_BUNDLE).")(fn)
    return fn


@contextlib.contextmanager
def open_runtime(host: HostProfile, conn: Connection) -> Iterator[object]:
    from devenv.runtimes.factory import open_runtime as _open

    runtime = _open(host, conn)
    try:
        yield runtime
    finally:
        runtime.close()


@contextlib.contextmanager
def open_provisioner(host: HostProfile, conn: Connection, with_key: bool = True):
    """(Provisioner for the host's runtime, the key environments accept) for the command's duration."""
    from devenv.remote.envkey import ensure_key
    from devenv.runtimes.factory import settle
    from devenv.services.provision import Provisioner

    host = settle(host, conn)  # `runtime: auto` (an ssh destination): docker if the host has it, else the host
    key = ensure_key() if with_key and host.runtime == "docker" else None
    with open_runtime(host, conn) as runtime:
        if host.runtime == "host":
            from devenv.services.host_provision import HostProvisioner

            yield HostProvisioner(runtime, host), key
        else:
            yield Provisioner(runtime, host), key


def print_access(host: HostProfile, env: EnvProfile, status: EnvStatus, token: str | None, *,
                 detach: bool, local_ports: dict[str, int] | None = None) -> None:
    """How to reach the environment: URL (when its port is reachable from here), ssh, logs, stop."""
    ports = local_ports or (status.ports if host.local else {})
    env_flag = f" --env {env.name}" if env.name != host.default_env else ""
    label = click.style
    if env.jupyter:
        if "jupyter" in ports and token:
            click.echo(f"  {label('Jupyter', bold=True)}  {jupyter.lab_url(ports['jupyter'], token)}")
        else:
            click.echo(f"  {label('Jupyter', bold=True)}  devenv jupyter {host.name}{env_flag}   "
                       f"(opens a tunnel and prints the URL with its token)")
    if host.runtime == "host":
        click.echo(f"  {label('Shell', bold=True)}    devenv ssh {host.name}   (the host itself: runtime host)")
    elif env.sshd:
        click.echo(f"  {label('Shell', bold=True)}    devenv ssh {host.name}{env_flag}")
    click.echo(f"  {label('Logs', bold=True)}     devenv logs {host.name}{env_flag} -f")
    click.echo(f"  {label('Stop', bold=True)}     devenv down {host.name}{env_flag}   "
               f"(keeps the workspace; --purge deletes it)")
    if not host.local and detach:
        click.echo(f"  Running detached: no tunnels held; `devenv tunnel {host.name} PORT` forwards a port.")


def open_forwards(host: HostProfile, conn: Connection, wanted: list[tuple[str, str, int, int | None]]):
    """Open tunnels for (name, remote host, remote port, preferred local port); returns the tunnel."""
    from devenv.remote.tunnels import Forward, choose_local_port, open_tunnel

    forwards = [Forward(name, rhost, rport, choose_local_port(preferred)) for name, rhost, rport, preferred in wanted]
    return open_tunnel(host, conn, forwards)


def hold(tunnel, host: HostProfile) -> None:
    """Keep the tunnel open until Ctrl-C (exit 0) or until it dies (an error saying how to reopen it)."""
    import signal
    import time

    from devenv.errors import ConnectError

    def interrupted(signum, frame):
        raise KeyboardInterrupt

    # SIGTERM/SIGHUP (a closed terminal, a supervisor) close the tunnel as Ctrl-C does.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupted)
    via = "OpenSSH" if tunnel.kind == "openssh" else "devenv's SSH connection"
    click.echo(f"Tunnels open through {via}. Ctrl-C closes them; the environment keeps running.", err=True)
    try:
        while tunnel.alive():
            time.sleep(0.5)
        raise ConnectError(f"the tunnel to {host.name} closed (network lost, or the host went away)",
                           f"reopen it with `devenv jupyter {host.name}`")
    except KeyboardInterrupt:
        click.echo("Tunnels closed.", err=True)
    finally:
        tunnel.close()
