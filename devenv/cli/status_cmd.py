"""`devenv status [HOST...]`: the environments each host reports (labels), so it works without local state."""

from __future__ import annotations

import click

from devenv.cli import main, redact
from devenv.cli.common import accept_new_host_option, exit_with_worst, host_names, load_host, per_host
from devenv.cli.render import emit_json
from devenv.config import autostop as autostop_config
from devenv.config import hostref
from devenv.env import spec as envspec
from devenv.env.info import EnvStatus
from devenv.errors import DevenvError
from devenv.services.session import open_env

STATE_COLOR = {"running": "green", "created": "yellow", "exited": "red", "restarting": "red", "absent": None}


def _host_status(name: str, accept_new_host: bool) -> list[EnvStatus]:
    with open_env(name, accept_new_host=accept_new_host) as session:
        return session.with_answers(session.backend.status())


@main.command()
@click.argument("hosts", nargs=-1)
@accept_new_host_option
@click.option("--json", "as_json", is_flag=True, help="Print the environments as JSON.")
def status(hosts: tuple[str, ...], accept_new_host: bool, as_json: bool) -> None:
    """Environments on HOSTs (profiles, @groups, ssh aliases or user@host[:port]; default: your host profiles
    and this machine, not the bundled examples), read from the hosts themselves.

    Exits 3 when a host could not be reached (the others are still shown), 2 for a bad host name.
    """
    names = host_names(hosts) if hosts else hostref.default_status_hosts()
    results = [(name, found or [], err) for name, found, err in
               per_host(names, lambda n: _host_status(n, accept_new_host))]
    # a bundled example (a100-box) that does not resolve here is shown as an example, never as a failure
    examples = {name: err for name, _, err in results if err and _is_example(name)}
    results = [(name, found, None if name in examples else err) for name, found, err in results]
    failed = [(name, err.message + (f" ({err.hint})" if err.hint else "")) for name, _, err in results if err]
    if as_json:
        emit_json({"schema_version": 1, "environments": [s.to_dict() for _, found, _ in results for s in found],
                   "errors": {name: error for name, error in failed},
                   "examples": {name: err.message for name, err in examples.items()}})
    else:
        rows = [s for _, found, _ in results for s in found]
        if rows:
            # host-side ports: on each host's loopback, not this machine's (`devenv jupyter` / `tunnel` forward them)
            header = (f"{'HOST':<14} {'ENV':<12} {'OWNER':<10} {'STATE':<11} {'JUPYTER@HOST':<16} {'SSH@HOST':<16} "
                      f"{'GPUS':<8} SPEC")
            click.echo(click.style(header, bold=True))
            for s in rows:
                state = click.style(f"{s.state:<11}", fg=STATE_COLOR.get(s.state))
                jup = f"host:{s.ports['jupyter']}" if "jupyter" in s.ports else "-"
                ssh = f"host:{s.ports['ssh']}" if "ssh" in s.ports else "-"
                detail = "  ".join(x for x in (s.detail, _silent(s), _autostop(s)) if x)
                click.echo(f"{s.host:<14} {s.env:<12} {s.owner:<10} {state} {jup:<16} {ssh:<16} {s.gpus or '-':<8} "
                           f"{(s.spec_hash or '-')[:12]}{'  ' + detail if detail else ''}")
            click.echo("Ports are on each host's own 127.0.0.1, not this machine's: `devenv jupyter HOST` or "
                       "`devenv tunnel HOST PORT` forwards them here.")
            for s in rows:
                if s.autostop and s.autostop.get("warning"):
                    left = autostop_config.describe_window(s.autostop["stops_in_s"])
                    click.secho(f"{s.host}: '{s.env}' {s.autostop.get('action') or 'stop'}s itself in {left} "
                                f"unless it is used (idle {autostop_config.describe_window(s.autostop['idle_for_s'])}"
                                f" of {autostop_config.describe_window(s.autostop['window_s'])})",
                                fg="yellow", err=True)
                if s.not_answering:
                    click.secho(f"{s.host}: '{s.env}' runs but {_silent(s, plain=True)}: "
                                + "; ".join(f"{name} {said}" for name, said in s.answers.items()
                                            if name in s.not_answering), fg="yellow", err=True)
                    click.secho(f"  `devenv up {s.host} --env {s.env}` repairs it (starts the service again, or "
                                f"restarts the container; the workspace is kept)"
                                + (f", run by its owner '{s.owner}'" if s.owner != envspec.owner() else ""),
                                fg="yellow", err=True)
        elif not failed:
            click.echo(f"No environments on {', '.join(names)}.")
        for name, error in failed:  # the name as given may be anything (a pasted key?): a preview of it
            click.secho(redact(f"{name}: {error}", [name]), fg="red", err=True)
        for name, err in examples.items():
            click.secho(f"{name}: bundled example profile, not reachable from here ({err.message}); "
                        f"write your own with `devenv hosts add {name} --ssh ALIAS`", fg="yellow", err=True)
    exit_with_worst([err.exit_code for _, _, err in results if err])


def _autostop(s: EnvStatus) -> str:
    """What autostop says of an environment: "idle 12 m, stops in 78 m", "stopped: idle 90 m", why it is not
    idle ("in use: sessions, gpu"), and a signal it cannot read ("gpu unknown: nvidia-smi not found")."""
    a = s.autostop
    if not a:
        return ""
    describe = autostop_config.describe_window
    if a["state"] in ("stopped", "stopping"):
        verb = "removed" if a.get("action") == "down" else "stopped"
        return click.style(f"{verb}: {a['reason'] or 'idle'}" if a["state"] == "stopped" else "autostop: stopping",
                           fg="cyan")
    if a["state"] == "not watching":
        return click.style("autostop: the watcher is not running (`devenv up` starts it again)", fg="yellow")
    unknown = "; ".join(f"{name} unknown: {said}" for name, said in a.get("unknown", {}).items())
    if a.get("held_by"):
        text = f"autostop: in use ({', '.join(a['held_by'])})"
    else:
        text = f"idle {describe(a['idle_for_s'])}, stops in {describe(a['stops_in_s'])}"
    text += f"; {unknown}" if unknown else ""
    return click.style(text, fg="yellow") if a.get("warning") or unknown else text


def _silent(s: EnvStatus, plain: bool = False) -> str:
    """"sshd not answering" for a running environment whose probed services did not all answer."""
    if not s.not_answering:
        return ""
    text = f"{' and '.join(s.not_answering)} not answering"
    return text if plain else click.style(text, fg="yellow")


def _is_example(name: str) -> bool:
    try:
        return hostref.is_example(load_host(name))
    except DevenvError:
        return False
