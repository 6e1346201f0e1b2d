"""`devenv monitor [HOST...]`: the GPU monitor TUI, or with --once a one-shot table (or JSON) for scripts."""

from __future__ import annotations

import sys
import time
from concurrent.futures import ThreadPoolExecutor
from types import FrameType
from typing import TYPE_CHECKING, NoReturn

import click

from devenv.cli import main
from devenv.cli.common import (
    EXIT_FAILED,
    accept_new_host_option,
    env_option,
    host_names,
    load_host,
    worst_exit_code,
)
from devenv.cli.params import Seconds
from devenv.cli.render import emit_json
from devenv.config.profiles import HostProfile
from devenv.errors import ConnectError, DevenvError
from devenv.gpu.format import once_table
from devenv.services.monitor import ERROR, HostSnapshot

if TYPE_CHECKING:
    from devenv.services.monitor_sources import Source
    from devenv.tui.monitor_app import Sampler

REACHED = ("ok", "no-gpu", "no-job", "job-pending")


@main.command()
@click.argument("hosts", nargs=-1, metavar="[HOST]...")
@click.option("--once", is_flag=True, help="Print one gpustat-like table and exit (no terminal needed).")
@click.option("--json", "as_json", is_flag=True, help="Print one sample as JSON and exit (implies --once).")
@click.option("--interval", type=Seconds(0.1, 3600), default=1.0, show_default=True,
              help="Seconds between GPU samples in the TUI.")
@click.option("--watch", is_flag=True, help="With --json: keep sampling and write one JSON object per line "
              "(NDJSON) per new sample of each host, until interrupted.")
@click.option("--prometheus", "prometheus", metavar="ADDR:PORT",
              help="Serve the samples on ADDR:PORT/metrics with dcgm-exporter's names (no TUI). Loopback only, "
                   "e.g. 127.0.0.1:9400.")
@click.option("--prometheus-public", is_flag=True, help="Allow --prometheus on a non-loopback address.")
@env_option
@click.option("--readonly", is_flag=True, help="Watch only: up, down and terminate/kill are off.")
@accept_new_host_option
def monitor(hosts: tuple[str, ...], once: bool, as_json: bool, interval: float, watch: bool,
            prometheus: str | None, prometheus_public: bool, env: str | None, readonly: bool,
            accept_new_host: bool) -> None:
    """Watch GPUs, processes, logs and environments on HOSTs (default: every host with a running environment).

    HOSTs are profiles, @groups, ssh aliases or user@host[:port]; a Slurm cluster shows every node of your
    running devenv jobs, grouped by job. --once exits 3 when a host could not be reached (the others are still
    shown; a host without a GPU, or a cluster without a job, is reported, not an error), 1 when a host was
    reached but its nvidia-smi failed (a driver mismatch, a lost GPU, no answer), 2 for a bad name.
    """
    bind = None
    if prometheus is not None:
        from devenv.services.monitor_stream import parse_bind

        bind = parse_bind(prometheus, allow_public=prometheus_public)  # before connecting anywhere
    if watch and not as_json:
        raise click.UsageError("--watch goes with --json (NDJSON); the TUI watches by itself")
    if once and (bind is not None or watch):  # they serve until Ctrl-C: --once would be silently ignored
        raise click.UsageError("--once takes one look and exits; --prometheus and --watch keep serving (pick one)")
    host_profiles = [load_host(name) for name in host_names(hosts or default_hosts())]
    if env is not None:
        from devenv.services.session import resolve_env

        for profile in host_profiles:
            resolve_env(profile, env)  # a bad --env fails here (exit 2), not under every key of the TUI
    if bind is not None or watch:
        return run_headless(host_profiles, interval, accept_new_host, bind, ndjson=watch)
    if once or as_json:
        codes: dict[str, int] = {}
        snapshots = look_once(host_profiles, accept_new_host, codes)
        if as_json:
            from devenv.services.monitor_sources import jobs_json
            from devenv.services.monitor_stream import SCHEMA_VERSION

            emit_json({"schema_version": SCHEMA_VERSION, "hosts": [s.to_dict() for s in snapshots],
                       "jobs": jobs_json(snapshots)})
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
    run_tui(host_profiles, interval, accept_new_host, env, readonly)


def default_hosts() -> list[str]:
    """Every host with a running environment, asking the hosts themselves (as `devenv status` does)."""
    from devenv.services.monitor_wiring import hosts_with_running_env

    names, unasked = hosts_with_running_env()
    for line in unasked:
        click.secho(f"skipped {line}", fg="yellow", err=True)
    if not names:
        raise DevenvError("no host has a running environment",
                          "start one with `devenv up HOST`, or name the hosts: devenv monitor HOST...")
    return names


def look_once(host_profiles: list[HostProfile], accept_new_host: bool,
              codes: dict[str, int] | None = None) -> list[HostSnapshot]:
    """Sample every source once (a host, or each node of a cluster's jobs), in parallel; an unreachable host
    becomes an error row, not an exception (its exit code goes into `codes`)."""
    from devenv.services.monitor_sources import sample_source_once, sources

    def one(source: Source) -> HostSnapshot:
        try:
            snapshot = sample_source_once(source, accept_new_host)
            if snapshot.state == ERROR and codes is not None:
                codes.setdefault(source.name, EXIT_FAILED)  # reached, but its nvidia-smi failed: 1, not 3
            return snapshot
        except DevenvError as e:
            if codes is not None:
                codes[source.name] = e.exit_code
            return HostSnapshot(source.name, ERROR, time.time(), e.message, e.hint, job=source.place)

    found = sources(host_profiles, accept_new_host, codes)
    with ThreadPoolExecutor(max_workers=min(16, len(found) or 1)) as pool:
        return list(pool.map(one, found))


def run_headless(host_profiles: list[HostProfile], interval: float, accept_new_host: bool, bind: tuple[str, int] | None,
                 ndjson: bool) -> None:
    """NDJSON on stdout and/or a Prometheus endpoint, from long-lived samplers, until Ctrl-C / SIGTERM / a
    closed pipe (each ends with exit 0). Both read one SamplerSet, which a SamplerFollower keeps in step with
    the clusters' jobs (a job started since shows, one that ended says job-ended), as the TUI does."""
    import json
    import signal

    from devenv.services.monitor_stream import SamplerSet, serve_prometheus, watch_records

    def interrupted(signum: int, frame: FrameType | None) -> NoReturn:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    from devenv.services.monitor_sources import SamplerFollower, SourceFollower, sampler_for, sources

    found = sources(host_profiles, accept_new_host)
    live = SamplerSet(sampler_for(s, interval, accept_new_host).start() for s in found)
    follower = SamplerFollower(SourceFollower(found, accept_new_host), live,
                               lambda source: sampler_for(source, interval, accept_new_host)).start()
    server = None
    try:
        if bind is not None:
            server = serve_prometheus(live, *bind)[0]
            click.echo(f"serving {len(live)} host(s) on http://{bind[0]}:{bind[1]}/metrics; Ctrl-C stops",
                       err=True)
        if ndjson:
            out = click.get_text_stream("stdout")
            for rec in watch_records(live, min(interval, 1.0)):
                out.write(json.dumps(rec, default=str) + "\n")
                out.flush()
        else:
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:  # `| head`: the reader has what it wanted
        sys.stderr.close()
    finally:
        follower.stop()
        if server is not None:
            server.shutdown()
        for sampler in live:
            sampler.stop(timeout=0)


def run_tui(host_profiles: list[HostProfile], interval: float, accept_new_host: bool, env: str | None = None,
            readonly: bool = False) -> None:
    from devenv.services.monitor_keys import HostChanges
    from devenv.services.monitor_sources import SourceFollower, sampler_for, sources
    from devenv.services.monitor_wiring import services_for
    from devenv.tui.monitor_app import create_monitor_app

    found = {s.name: s for s in sources(host_profiles, accept_new_host)}

    def sampler_factory(name: str) -> Sampler:
        return sampler_for(found[name], interval, accept_new_host)

    profiles = {name: s.profile for name, s in found.items()}
    places = {name: s.place for name, s in found.items() if s.place is not None}
    services = services_for(profiles, accept_new_host, env, places=places)
    follower = SourceFollower(list(found.values()), accept_new_host)

    def follow_hosts() -> HostChanges:
        """The clusters' jobs looked at again (the TUI's worker calls it): new nodes become sources here."""
        changes = follower.refresh()
        for source in changes.added:
            found[source.name] = source
            profiles[source.name] = source.profile
            if source.place is not None:
                places[source.name] = source.place
        return HostChanges([s.name for s in changes.added], changes.ended, changes.gone)

    if follower:
        services.follow_hosts = follow_hosts
    if readonly:
        services.up = services.down = services.kill = None
    app = create_monitor_app(list(found), sampler_factory, services, readonly=readonly)
    app.run()
