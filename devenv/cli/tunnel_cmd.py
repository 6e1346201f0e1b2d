"""`devenv tunnel HOST PORT[:LOCAL]...`: forward ports of the environment (e.g. TensorBoard) to this machine."""

from __future__ import annotations

import re

import click

from devenv.cli import main
from devenv.cli.common import accept_new_host_option, env_option
from devenv.cli.envcommon import hold
from devenv.errors import DevenvError
from devenv.services.session import open_env

_SPEC = re.compile(r"^(\d{1,5})(?::(\d{1,5}))?$")


@main.command()
@click.argument("host")
@click.argument("ports", nargs=-1, required=True, metavar="PORT[:LOCAL]...")
@env_option
@accept_new_host_option
def tunnel(host: str, ports: tuple[str, ...], env: str | None, accept_new_host: bool) -> None:
    """Forward environment PORTs to this machine's 127.0.0.1 (same port, or LOCAL) until Ctrl-C."""
    wanted_ports = []
    for spec in ports:
        match = _SPEC.match(spec)
        if not match or not all(0 < int(p) < 65536 for p in match.groups() if p):
            raise click.BadParameter(f"'{spec}' is not PORT or PORT:LOCAL", param_hint="PORTS")
        wanted_ports.append((int(match.group(1)), int(match.group(2)) if match.group(2) else None))
    with open_env(host, env, accept_new_host=accept_new_host) as session:
        env_profile = session.env
        status = session.backend.find(env_profile.name)
    if status is None or not status.running:
        raise DevenvError(f"the environment '{env_profile.name}' on {host} is not running",
                          f"start it with `devenv up {host}`")
    if session.host.local:  # this machine reaches the container's address directly
        for rport, _ in wanted_ports:
            click.echo(f"{status.address}:{rport} -> {env_profile.name}:{rport} (no tunnel needed here)")
        return
    # Container ports are reached at the container's address on the host's Docker network.
    wanted = [(f"port {rport}", status.address, rport, local or rport) for rport, local in wanted_ports]
    tun = session.forward(wanted)
    for f in tun.forwards:
        click.echo(f"127.0.0.1:{f.local_port} -> {env_profile.name}:{f.remote_port}")
    hold(tun, host)
