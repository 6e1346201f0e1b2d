"""`devenv monitor [HOST...]`: the GPU monitor TUI, or with --once a one-shot table (or JSON) for scripts."""

from __future__ import annotations

import sys
import time
from concurrent.futures import ThreadPoolExecutor

import click

from devenv.cli import main
from devenv.cli.common import accept_new_host_option, connect, host_names, load_host, worst_exit_code
from devenv.cli.params import Seconds
from devenv.cli.render import emit_json
from devenv.errors import ConnectError, DevenvError
from devenv.gpu.format import once_table
from devenv.services.monitor import ERROR, HostSnapshot, sample_once

REACHED = ("ok", "no-gpu")


@main.command()
@click.argument("hosts", nargs=-1, metavar="[HOST]...")
@click.option("--once", is_flag=True, help="Print one gpustat-like table and exit (no terminal needed).")
@click.option("--json", "as_json", is_flag=True, help="Print one sample as JSON and exit (implies --once).")
@click.option("--interval", type=Seconds(0.1, 3600), default=1.0, show_default=True,
              help="Seconds between GPU samples in the TUI.")
@accept_new_host_option
def monitor(hosts: tuple[str, ...], once: bool, as_json: bool, interval: float, accept_new_host: bool) -> None:
    """Watch GPUs, processes, logs and environments on HOSTs (default: every host with a running environment).

    HOSTs are profiles, @groups, ssh aliases or user@host[:port]. --once exits 3 when a host could not be
    reached (the others are still shown; a host without a GPU is reported, not an error), 2 for a bad name.
    """
    host_profiles = [load_host(name) for name in host_names(hosts or default_hosts())]
    if once or as_json:
        codes: dict[str, int] = {}
        snapshots = look_once(host_profiles, accept_new_host, codes)
        if as_json:
            emit_json({"hosts": [s.to_dict() for s in snapshots]})
        else:
            click.echo(once_table(snapshots))
        failed = [s.host for s in snapshots if s.state not in REACHED]
        if failed:
            code = worst_exit_code([codes.get(name, ConnectError.exit_code) for name in failed])
            error = DevenvError(f"could not sample {', '.join(failed)}", "see the message under each host above")
            error.exit_code = code
            raise error
        return
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise DevenvError("devenv monitor needs a terminal", "use `devenv monitor HOST --once [--json]` in scripts")
    run_tui(host_profiles, interval, accept_new_host)


def default_hosts() -> list[str]:
    """Every host with a running environment, asking the hosts themselves (as `devenv status` does)."""
    from devenv.cli.monitor_services import hosts_with_running_env

    names, unasked = hosts_with_running_env()
    for line in unasked:
        click.secho(f"skipped {line}", fg="yellow", err=True)
    if not names:
        raise DevenvError("no host has a running environment",
                          "start one with `devenv up HOST`, or name the hosts: devenv monitor HOST...")
    return names


def look_once(host_profiles, accept_new_host: bool, codes: dict[str, int] | None = None) -> list[HostSnapshot]:
    """Sample every host once, in parallel; an unreachable host becomes an error row, not an exception
    (its exit code goes into `codes`)."""
    def one(profile) -> HostSnapshot:
        try:
            conn = connect(profile, accept_new_host)
            getattr(conn, "open", lambda: None)()  # connection errors here, with their own exit code
            return sample_once(conn)
        except DevenvError as e:
            if codes is not None:
                codes[profile.name] = e.exit_code
            return HostSnapshot(profile.name, ERROR, time.time(), e.message, e.hint)

    with ThreadPoolExecutor(max_workers=min(16, len(host_profiles) or 1)) as pool:
        return list(pool.map(one, host_profiles))


def run_tui(host_profiles, interval: float, accept_new_host: bool) -> None:
    from devenv.cli.monitor_services import services_for
    from devenv.services.monitor import HostSampler
    from devenv.tui.monitor_app import create_monitor_app

    by_name = {p.name: p for p in host_profiles}

    def sampler_factory(name: str) -> HostSampler:
        profile = by_name[name]
        return HostSampler(name, lambda: connect(profile, accept_new_host), interval=interval)

    app = create_monitor_app(list(by_name), sampler_factory, services_for(by_name, accept_new_host))
    app.run()
