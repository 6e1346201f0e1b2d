"""`devenv sanity CLUSTER --nodes N`: the multi-node checks on a Slurm cluster, rendered (services do the work)."""

from __future__ import annotations

import click

from devenv.checks.report import CheckReport
from devenv.cli.common import EXIT_FAILED, connect, load_host
from devenv.cli.render import emit_json, print_checks
from devenv.errors import ProfileError


def cluster_sanity(names: list[str], nodes: int | None, python: str | None, as_json: bool,
                   accept_new_host: bool) -> None:
    from devenv.schedulers.slurm import Slurm
    from devenv.services.environments.registry import known_backend
    from devenv.services.environments.slurm.sanity import run_multinode

    if len(names) != 1:
        raise ProfileError("--nodes runs on one cluster at a time", "name one Slurm host: devenv sanity CLUSTER "
                          "--nodes N")
    host = load_host(names[0])
    kind = known_backend(host)
    if kind is None or not kind.sanity_across_nodes:
        raise ProfileError(f"--nodes needs a Slurm cluster; {host.name} has runtime: {host.runtime}",
                           "add `runtime: slurm` (and `slurm:` settings) to a host profile for the login node")
    conn = connect(host, accept_new_host)
    count = nodes or (host.slurm.nodes if host.slurm else 1)
    say = None if as_json else (lambda text: click.echo(f"  .. {text}", err=True))
    if not as_json:
        click.echo(f"Running the multi-node sanity checks on {host.name} across {count} node(s)...", err=True)
    result = run_multinode(host, conn, Slurm(conn, host.name), count, python=python, on_step=say)
    if as_json:
        emit_json(result.to_dict())
    else:
        print_checks(CheckReport(host.name, f"{count} node(s)", result.verdict.checks, result.elapsed_s))
        for line in result.verdict.not_proven:
            click.secho(f"Not proven: {line}", fg="yellow")
        click.echo(f"Job {result.job_id} on {', '.join(result.nodes) or '?'}; log: {result.log_path}", err=True)
    if result.verdict.status == "fail":
        raise SystemExit(EXIT_FAILED)
