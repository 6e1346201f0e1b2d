"""`devenv tunnel HOST [LOCAL:]PORT...`: forward ports of the environment (e.g. TensorBoard) to this machine.

LOCAL:PORT reads as `ssh -L` and `docker -p` read it: this machine's port first, the environment's second."""

from __future__ import annotations

import re

import click

from devenv.cli import main
from devenv.cli.background import background_options, new_record
from devenv.cli.background import start as start_background
from devenv.cli.common import accept_new_host_option, env_option
from devenv.cli.envcommon import hold
from devenv.cli.ports import require_free
from devenv.errors import DevenvError
from devenv.remote.base import Connection
from devenv.services.background_tunnels import tunnel_id
from devenv.services.session import open_env

_SPEC = re.compile(r"^(?:(\d{1,5}):)?(\d{1,5})$")


@main.command()
@click.argument("host")
@click.argument("ports", nargs=-1, required=True, metavar="[LOCAL:]PORT...")
@env_option
@accept_new_host_option
@click.option("--json", "as_json", is_flag=True, help="Print the forwards as one JSON line (docs/json.md).")
@background_options
def tunnel(host: str, ports: tuple[str, ...], env: str | None, accept_new_host: bool, as_json: bool,
           background: bool, held_as: str | None) -> None:
    """Forward environment PORTs to this machine's 127.0.0.1 (same port, or LOCAL:PORT as ssh -L) until Ctrl-C.

    A LOCAL port that is taken is an error (exit 6); without LOCAL, a taken PORT gives a free one (printed).
    """
    wanted_ports = [_parse(spec) for spec in ports]
    if background:
        what = "ports-" + "-".join(f"{local}:{rport}" if local else str(rport) for rport, local in wanted_ports)
        argv = ["tunnel", host, *ports, *(["--env", env] if env else []),
                *(["--accept-new-host"] if accept_new_host else [])]
        start_background(tunnel_id(host, env, what), argv, as_json)
        return
    for _, local in wanted_ports:
        if local:
            require_free(local, "LOCAL")
    with open_env(host, env, accept_new_host=accept_new_host) as session:
        env_profile = session.env
        status = session.backend.find(env_profile.name)
    if status is None or not status.running:
        raise DevenvError(f"the environment '{env_profile.name}' on {host} is not running",
                          f"start it with `devenv up {host}`")
    if session.host.local:  # this machine reaches the container's address directly
        if as_json:
            _json(host, env_profile.name, [(status.address, rport, rport) for rport, _ in wanted_ports], None)
            return
        for rport, _ in wanted_ports:
            click.echo(f"{status.address}:{rport} -> {env_profile.name}:{rport} (no tunnel needed here)")
        return
    if not status.address:  # podman's slirp4netns: on no bridge, so no address the host could forward to
        raise DevenvError(f"the environment '{env_profile.name}' on {host} is on no network the host can reach "
                          "(podman's slirp4netns keeps other containers out): only its published ports answer",
                          f"forward through its sshd instead: devenv ssh {host} -- -N -L PORT:127.0.0.1:PORT")
    # Container ports are reached at the container's address on the host's Docker network.
    wanted: list[tuple[str, str, int, int | None]] = [
        (f"port {rport}", status.address, rport, local or rport) for rport, local in wanted_ports]
    tun = session.forward(wanted)
    for rport, local in wanted_ports:  # said before the forwards are printed: a script reads one line, then acts
        _say_if_silent(session.conn, status.address, env_profile.name, rport, local)
    if as_json:
        _json(host, env_profile.name, [("127.0.0.1", f.local_port, f.remote_port) for f in tun.forwards], tun.kind)
    for f in tun.forwards if not as_json else []:
        click.echo(f"127.0.0.1:{f.local_port} -> {env_profile.name}:{f.remote_port}")
    record = new_record(held_as, host, env_profile.name, "ports", tun.forwards, None) if held_as else None
    hold(tun, host, session.reopen_forwards, session.forwards_moved, record)


def _parse(spec: str) -> tuple[int, int | None]:
    """(environment port, local port or None) from PORT or LOCAL:PORT; anything else is bad input."""
    match = _SPEC.match(spec)
    if not match or not all(0 < int(p) < 65536 for p in match.groups() if p):
        hint = ("devenv forwards the environment's own ports: LOCAL:PORT, as `ssh -L LOCAL:localhost:PORT`"
                if spec.count(":") >= 2 else "e.g. 6006 (the same port here) or 16006:6006 (local 16006 -> 6006)")
        raise click.BadParameter(f"'{spec}' is not PORT or LOCAL:PORT ({hint})", param_hint="PORTS")
    local, remote = match.groups()
    return int(remote), int(local) if local else None


def _say_if_silent(conn: Connection, address: str, env: str, port: int, local: int | None) -> None:
    """A warning when nothing listens on the environment's port yet (the tunnel still waits for it), naming
    the swapped order when the LOCAL number is what answers there (the old PORT:LOCAL reading, or a slip)."""
    if _answers(conn, address, port) is not False:
        return
    swapped = local is not None and _answers(conn, address, local)
    if swapped:
        click.echo(f"Warning: nothing listens on port {port} in {env}, but port {local} does: "
                   f"{local}:{port} forwards local {local} to the environment's {port} (LOCAL:PORT, as ssh -L); "
                   f"for the environment's {local} run `devenv tunnel ... {port}:{local}`", err=True)
    else:
        click.echo(f"Warning: nothing listens on port {port} in {env} yet: the tunnel is open and connects "
                   "once a server listens there", err=True)


def _answers(conn: Connection, address: str, port: int) -> bool | None:
    """True/False: whether something accepts on address:port as the host sees it; None: cannot tell."""
    opener = getattr(conn, "open_port", None)
    if opener is None:
        return None
    try:
        opener(address, port, 5.0).close()
        return True
    except ConnectionRefusedError:
        return False
    except (OSError, DevenvError):
        return None


def _json(host: str, env: str, forwards: list[tuple[str, int, int]], kind: str | None) -> None:
    import json

    rows = [{"local": f"{address}:{local}", "local_port": local, "env_port": remote}
            for address, local, remote in forwards]
    click.echo(json.dumps({"schema_version": 1, "host": host, "env": env, "tunnel": kind, "forwards": rows}))
