"""`devenv up HOST`: a running PyTorch environment (Jupyter + sshd) on HOST, made or reattached idempotently."""

from __future__ import annotations

import sys

import click

from devenv.cli import main
from devenv.cli.common import accept_new_host_option, connect, env_option, load_host, resolve_env
from devenv.cli.envcommon import (
    build_input_options,
    hold,
    open_forwards,
    open_provisioner,
    print_access,
)
from devenv.cli.progress import ProgressPrinter
from devenv.cli.render import emit_json, print_checks
from devenv.env.image_context import BuildInputs
from devenv.services import provision
from devenv.services.preflight import run_check


class CliEvents(ProgressPrinter, provision.UpEvents):
    def confirm(self, question: str, details: list[str]) -> bool:
        self._end_line()
        click.echo(question, err=True)
        for line in details:
            click.echo(f"    {line}", err=True)
        if not sys.stdin.isatty():
            return False  # never recreate silently; the error says to pass --yes
        return click.confirm("Recreate?", default=False, err=True)


@main.command()
@click.argument("host")
@env_option
@accept_new_host_option
@click.option("--detach", "-d", is_flag=True, help="Leave it running and return; reopen tunnels later with "
                                                   "`devenv jupyter HOST` / `devenv tunnel HOST PORT`.")
@click.option("--yes", "-y", "assume_yes", is_flag=True, help="Recreate a changed environment without asking "
                                                               "(the workspace is kept).")
@click.option("--ready-timeout", type=click.FloatRange(1, 3600), default=180, show_default=True,
              help="Seconds to wait for Jupyter and sshd to answer.")
@build_input_options
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON (implies --detach).")
@click.option("--sync", "sync_dir", metavar="DIR", type=click.Path(exists=True, file_okay=False),
              help="Copy the project folder DIR into the workspace once it is up (see `devenv sync`).")
def up(host: str, env: str | None, accept_new_host: bool, detach: bool, assume_yes: bool, ready_timeout: float,
       ca_bundle: str | None, wheelhouse: str | None, offline: bool, as_json: bool, sync_dir: str | None) -> None:
    """Make (or reattach to) the environment on HOST: check, image, container, Jupyter and sshd, tunnels.

    Running it again is safe: a running environment with the same spec is only reattached; a changed one is
    shown as a diff and recreated on confirmation, keeping the workspace; a half-made one is finished.
    """
    host_profile = load_host(host)
    env_profile = resolve_env(host_profile, env)
    conn = connect(host_profile, accept_new_host)
    events = CliEvents()
    options = provision.UpOptions(BuildInputs.from_options(ca_bundle, wheelhouse, offline), ready_timeout, assume_yes)

    def preflight():
        report = run_check(conn, host_profile, env_profile)
        if not report.ok:
            print_checks(report)
        return report

    with open_provisioner(host_profile, conn) as (prov, key):
        result = prov.up(env_profile, key.public_line if key else "", key.fingerprint if key else "",
                         events=events, options=options, preflight=preflight)
    events._end_line()
    if sync_dir:
        from devenv.cli.sync_cmd import sync_after_up

        sync_after_up(host, env, accept_new_host, sync_dir)
    if as_json:
        emit_json({"schema_version": 1, "host": host, "env": env_profile.name, "action": result.action,
                   "image": result.image_action, "elapsed_s": round(result.elapsed_s, 3),
                   "status": result.status.to_dict(), "notes": result.notes,
                   "jupyter": _jupyter_json(host, host_profile.local, env_profile, result)})
        return
    verb = {"created": "created", "recreated": "recreated", "started": "started", "reattached": "reattached"}
    click.secho(f"Environment '{env_profile.name}' on {host} {verb[result.action]} in {result.elapsed_s:.1f} s",
                fg="green", bold=True)
    if key and env_profile.sshd and result.host_key and "ssh" in result.status.ports:
        from devenv.cli.ssh_cmd import write_env_entry

        write_env_entry(host_profile, env_profile.name, result.status.ports["ssh"], result.host_key, key.private_path)
    if detach or host_profile.local or not (env_profile.jupyter and "jupyter" in result.status.ports):
        print_access(host_profile, env_profile, result.status, result.token, detach=detach)
        return
    preferred = env_profile.ports.get("jupyter", 8888)
    tunnel = open_forwards(host_profile, conn, [("jupyter", "127.0.0.1", result.status.ports["jupyter"], preferred)])
    print_access(host_profile, env_profile, result.status, result.token, detach=False,
                 local_ports={"jupyter": tunnel.forwards[0].local_port})
    hold(tunnel, host_profile)


def _jupyter_json(host: str, local: bool, env_profile, result) -> dict | None:
    """Where Jupyter is: its URL when this machine reaches it as is (a local host), else how to tunnel to it."""
    from devenv.services import jupyter

    port = result.status.ports.get("jupyter")
    if not env_profile.jupyter or port is None:
        return None
    env_flag = f" --env {env_profile.name}"
    return {"url": jupyter.lab_url(port, result.token) if local and result.token else None,
            "host_port": port, "token": result.token,
            "tunnel_command": None if local else f"devenv jupyter {host}{env_flag} --json"}
