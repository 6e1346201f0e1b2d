"""`devenv up HOST`: a running PyTorch environment (Jupyter + sshd) on HOST, made or reattached idempotently."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from devenv.cli import main
from devenv.cli.common import accept_new_host_option, env_option, gpus_option
from devenv.cli.envcommon import build_input_options, hold, print_access, tunnel_shown
from devenv.cli.params import Seconds
from devenv.cli.progress import ProgressPrinter
from devenv.cli.render import emit_json
from devenv.config import hostref
from devenv.env.image_context import BuildInputs
from devenv.services.environments.contract import JupyterAccess, UpOptions
from devenv.services.session import open_env

if TYPE_CHECKING:
    from devenv.services.placement import GroupChoice


@main.command()
@click.argument("host", metavar="HOST|@GROUP")
@env_option
@accept_new_host_option
@click.option("--detach", "-d", is_flag=True, help="Leave it running and return; reopen tunnels later with "
                                                   "`devenv jupyter HOST` / `devenv tunnel HOST PORT`.")
@click.option("--yes", "-y", "assume_yes", is_flag=True, help="Recreate a changed environment without asking "
                                                               "(the workspace is kept); push a missing image from "
                                                               "a fleet host that has it without asking.")
@click.option("--push-from", metavar="HOST", help="Copy the missing image from HOST (`devenv image push`), not "
                                                  "from the first host of the host's groups that has it.")
@click.option("--no-push", is_flag=True, help="Build a missing image on the host even when a fleet host has it.")
@click.option("--ready-timeout", type=Seconds(1, 3600), default=180, show_default=True,
              help="Seconds to wait for Jupyter and sshd to answer.")
@click.option("--gpus", "gpus", metavar="N|0,1|all|none", callback=gpus_option,
              help="GPUs for the environment, instead of the profile's `gpus:`; N = N free ones, picked now.")
@click.option("--allow-busy", is_flag=True, help="With gpus: N, take busy GPUs when too few are free.")
@build_input_options
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON (implies --detach).")
@click.option("--devcontainer", "devcontainer", metavar="PATH",
              help="A devcontainer.json (or a project folder with .devcontainer/) to build on; default: the one "
                   "in the current folder, if any.")
@click.option("--autostop", "autostop", metavar="DURATION",
              help="Stop the environment once idle this long (90m, 1h30m): no ssh/exec session, no detached run, "
                   "no busy kernel, GPUs under 5 %. Instead of the profile's `autostop:`.")
@click.option("--no-autostop", is_flag=True, help="Turn autostop off for this environment (the watcher ends).")
@click.option("--sync", "sync_dir", metavar="DIR", type=click.Path(exists=True, file_okay=False),
              help="Copy the project folder DIR into the workspace once it is up (see `devenv sync`).")
def up(host: str, env: str | None, accept_new_host: bool, detach: bool, assume_yes: bool, ready_timeout: float,
       gpus: str | None, allow_busy: bool, ca_bundle: str | None, wheelhouse: str | None, offline: bool,
       as_json: bool, devcontainer: str | None, autostop: str | None, no_autostop: bool,
       sync_dir: str | None, push_from: str | None, no_push: bool) -> None:
    """Make (or reattach to) the environment on HOST: check, image, container, Jupyter and sshd, tunnels.

    With @GROUP, the group's host with enough free GPUs, preferring one that has the image, then the least loaded
    (said, with every host passed over and why); a re-`up @GROUP` returns to the host it chose.

    Running it again is safe: a running environment with the same spec is only reattached; a changed one is
    shown as a diff and recreated on confirmation, keeping the workspace; a half-made one is finished.
    """
    if autostop is not None and no_autostop:
        raise click.UsageError("--autostop and --no-autostop contradict each other: pass one")
    if push_from and no_push:
        raise click.UsageError("--push-from and --no-push contradict each other: pass one")
    from devenv.config import autostop as autostop_config

    options = UpOptions(BuildInputs.from_options(ca_bundle, wheelhouse, offline), ready_timeout, assume_yes,
                        allow_busy, autostop=autostop_config.from_flag(autostop) if autostop else None,
                        no_autostop=no_autostop)
    events = ProgressPrinter()
    group, placed = None, None
    if hostref.is_group(host):  # the group's host: the remembered one, else the best fit, and why
        group, placed = host, choose_in_group(host, env, gpus, accept_new_host, events)
        host = placed.host
    with open_env(host, env, accept_new_host=accept_new_host, events=events) as session:
        session.connect_ahead()  # every way through `up` connects: the connection overlaps what follows
        session.use_gpus(gpus)
        from devenv.cli import devcontainer_up, project_env

        found = devcontainer_up.find(devcontainer or project_env.remembered_source(env))
        dc = found[0] if found else None
        if found is None:  # a project's own image is built from its devcontainer, never pushed
            from devenv.cli.up_push import offer_push

            session.check_ahead(allow_busy)  # the host's check overlaps the offer's question and the engine's connect
            if offer_push(host, env, accept_new_host=accept_new_host, assume_yes=assume_yes, push_from=push_from,
                          known_source=placed.image_from if placed else None, no_push=no_push, session=session):
                session.drop_check_ahead()   # it saw the host without the image pushed since
        if found is not None:
            project_env.own_env(session, env, *found)  # the project's own environment, not the host's default
            devcontainer_up.apply(session, *found)
        if not (detach or as_json):
            session.prestart_tunnels()
        try:
            result = session.up(options)
        except KeyboardInterrupt:  # Ctrl-C, SIGTERM, SIGHUP: what is left, and how to go on (the group says why)
            events.done()
            made = session.env  # resolved before up started (use_gpus): no round trip here
            named = f" --env {made.name}" if env or made.name != session.profile.default_env else ""
            click.echo(f"`up` stopped before '{made.name}' was ready: what it made so far stays on {host}; "
                       f"`devenv up {host}{named}` finishes it, `devenv down {host}{named}` removes it.", err=True)
            raise
        if group is not None:
            from devenv.services.placement import remember

            remember(group, session.env.name, host)
        synced = None
        if sync_dir:  # the project first: the devcontainer's lifecycle commands find it in the workspace
            from devenv.cli.sync_cmd import sync_after_up

            events.done()
            synced = sync_after_up(host, session.env.name, accept_new_host, sync_dir)
        if dc is not None:
            devcontainer_up.after_up(session, result, dc, synced)
    events.done()
    env_profile = session.env
    if as_json:
        emit_json({"schema_version": 1, "host": host, "env": env_profile.name, "action": result.action,
                   "image": result.image_action, "elapsed_s": round(result.elapsed_s, 3),
                   "status": result.status.to_dict(), "notes": result.notes,
                   "jupyter": _jupyter_json(host, session.host.local, session.jupyter_of(result)),
                   "placement": None if placed is None else {
                       "group": group, "remembered": placed.remembered, "image_from": placed.image_from,
                       **(placed.placement.to_dict() if placed.placement else {"host": placed.host})},
                   "devcontainer": None if dc is None else {
                       "source": dc.source, "image": env_profile.image, "forward_ports": list(dc.forward_ports),
                       "base_image": env_profile.project_build.tag if env_profile.project_build else dc.image,
                       "user": env_profile.user or "root",
                       "tunnel_commands": devcontainer_up.port_notes(host, dc)}})
        return
    click.secho(f"Environment '{env_profile.name}' on {host} {result.action} in {result.elapsed_s:.1f} s",
                fg="green", bold=True)
    access = session.jupyter_of(result)
    if detach or access is None or (session.host.local and access.relay is None):
        print_access(session, env_profile, result.status, result.token, detach=detach)
        for note in devcontainer_up.port_notes(host, dc) if dc is not None else []:
            click.echo(f"  {note}")
        return
    url, tunnel = session.open_jupyter(access)
    ports = None
    with tunnel_shown():
        try:
            print_access(session, env_profile, result.status, result.token, detach=False, jupyter_url=url)
            ports = devcontainer_up.open_forwards(session, result, dc) if dc is not None else None
            if tunnel is not None:
                from devenv.cli.jupyter_cmd import reopen_jupyter

                reopen = reopen_jupyter(session, url)
                if ports is not None:   # forwardPorts held beside Jupyter: a dropped link reopens them all
                    from devenv.services.held_tunnel import Together, reopen_together

                    reopen = reopen_together([(len(tunnel.forwards), reopen),
                                              (len(ports.forwards), session.reopen_forwards)])
                    tunnel, ports = Together([tunnel, ports]), None
                hold(tunnel, host, reopen, session.jupyter_moved)
        finally:
            if ports is not None:
                ports.close()


def choose_in_group(group: str, env: str | None, gpus: str | None, accept_new_host: bool,
                    events: ProgressPrinter) -> GroupChoice:
    """`up @group`: which host, said with the reason and every host passed over (services.placement)."""
    from devenv.services.placement import choose_host

    events.step(f"Choosing a host of {group}")
    placed = choose_host(group, env, gpus, accept_new_host=accept_new_host)
    if placed.placement is None:
        events.step(f"Returning to {placed.host}, where `up {group}` made it before")
        return placed
    events.step(f"Chose {placed.placement.why}")
    for other, why in placed.placement.passed_over:
        events.step(f"Passed over {other}: {why}")
    if placed.image_from:
        named = f" --env {env}" if env else ""
        events.step(f"{placed.host} lacks the image; {placed.image_from} has it: `devenv image push "
                    f"{placed.image_from} {placed.host}{named}` copies it there without a registry (or let `up` "
                    "build it)")
    return placed


def _jupyter_json(host: str, local: bool, access: JupyterAccess | None) -> dict[str, Any] | None:
    """Where Jupyter is: its URL when this machine reaches it as is (a local host), else how to tunnel to it."""
    from devenv.services import jupyter

    if access is None:
        return None
    direct = local and access.relay is None
    return {"url": jupyter.lab_url(access.port, access.token) if direct else None,
            "host_port": access.port, "token": access.token,
            "tunnel_command": None if direct else f"devenv jupyter {host} --env {access.status.env} --json"}
