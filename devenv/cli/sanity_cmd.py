"""`devenv sanity HOST`: GPU health + mixed-precision training checks on the host, a verdict, a saved report."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypedDict

import click

from devenv.checks.report import FAIL, NO_GPU, Status
from devenv.cli import main
from devenv.cli.common import (
    accept_new_host_option,
    env_option,
    finish_per_host,
    gpus_option,
    host_names,
    load_host,
    per_host,
)
from devenv.cli.render import STATUS_STYLE, emit_json, print_result
from devenv.config import validate
from devenv.errors import BadInput
from devenv.sanity.verdict import BUSY, HEALTH_IDS, NOT_JUDGED, UNHEALTHY, fmt
from devenv.services.environments.registry import known_backend
from devenv.services.session import open_env

if TYPE_CHECKING:
    from devenv.services.sanity import EventHandler, SanityReport

EXIT_FAIL, EXIT_NO_GPU, EXIT_BUSY, EXIT_UNHEALTHY = 1, 4, 5, 7
EXIT_OF = {FAIL: EXIT_FAIL, NO_GPU: EXIT_NO_GPU, BUSY: EXIT_BUSY, UNHEALTHY: EXIT_UNHEALTHY}


class _Sharing(TypedDict):
    """How the run shares the host's GPUs (--gpus, --allow-busy, --wait-idle), as run_sanity takes it."""

    gpus: str | None
    allow_busy: bool
    wait_idle: float | None
    dcgm: int | None


@main.command()
@click.argument("hosts", nargs=-1, required=True, metavar="HOST...")
@click.option("--suite", type=click.Choice(["quick", "full"]), default="quick", show_default=True,
              help="quick: about a minute on an H200; full: adds torch.compile, longer runs, multi-GPU DDP.")
@env_option
@click.option("--python", "python", metavar="PATH",
              help="Python with PyTorch to run under (default: the environment's, or the host profile's `python`).")
@click.option("--on-host", is_flag=True, help="On a Docker host, run on the bare host instead of in the environment.")
@click.option("--only", metavar="STAGES", default="",
              help="Comma-separated stages: matmul,memcpy,probe,gpt,resnet,compile,pergpu,ddp.")
@click.option("--inject", type=click.Choice(["inf", "fp16-no-scaler"]), default=None,
              help="Plant a fault, to see the verdict catch it (tests devenv, not the host).")
@click.option("--gpus", "gpus", metavar="0,1|N|all", callback=gpus_option,
              help="GPUs to run on: host indices (0,1 or device=1), N free ones (least used), or all.")
@click.option("--allow-busy", is_flag=True,
              help="Judge speed even when other processes share the GPUs (the report says so).")
@click.option("--wait-idle", "wait_idle", type=click.FloatRange(0, 86400), default=None, metavar="SECONDS",
              help="First wait up to SECONDS for the GPUs to be free of other processes.")
@click.option("--dcgm", "dcgm", type=click.Choice(["1", "2", "3"]), is_flag=False, flag_value="1", default=None,
              metavar="[1|2|3]", help="Also run DCGM's diagnostics at this level (`dcgmi diag -r N`; 1 when "
                                      "no level is given) and fold them into the verdict.")
@click.option("--compare-last", is_flag=True, help="Compare with the last saved report of this host.")
@click.option("--no-save", is_flag=True, help="Do not save the report under devenv's state folder.")
@click.option("--json", "as_json", is_flag=True, help="Print the report and verdict as JSON.")
@click.option("--nodes", type=click.IntRange(1, 1024), default=None, metavar="N",
              help="On a Slurm cluster: the multi-node checks across N nodes (srun + torchrun).")
@accept_new_host_option
def sanity(hosts: tuple[str, ...], suite: str, env: str | None, python: str | None, on_host: bool, only: str,
           inject: str | None, gpus: str | None, allow_busy: bool, wait_idle: float | None, dcgm: str | None,
           compare_last: bool, no_save: bool, as_json: bool, accept_new_host: bool, nodes: int | None) -> None:
    """Prove HOST's GPU delivers: matmul rates and memory bandwidth against its SKU, repeatable results,
    and GPT- and ResNet-style training in fp32, TF32, fp16 + GradScaler and bf16.

    Other processes on the GPUs (pid, user, container; the run's own do not count) make the speed checks
    "not judged" and the verdict BUSY: a shared GPU is not a broken one.

    A process that only holds memory (no SM time in any sample: nvidia-smi pmon) is named and is no
    contention. The run's GPUs' health (check's health section) is read first: a sick GPU makes the verdict
    UNHEALTHY (the finding first, speed not judged).

    Exits 0 on pass or warn, 1 when a check fails, 4 when there is no GPU (nothing about a GPU was proven),
    5 when the GPU was shared (BUSY: speed not judged), 7 when a GPU is UNHEALTHY, 3 when the host cannot be
    reached. HOST may be an @group: the hosts run in parallel, a verdict each.
    """
    from devenv.services.sanity import STAGES

    if only.strip() and not any(s.strip() for s in only.split(",")):
        raise click.BadParameter(f"names no stage; choose from {','.join(STAGES)} (or leave --only out for all)",
                                 param_hint="--only")
    unknown = [s.strip() for s in only.split(",") if s.strip() and s.strip() not in STAGES]
    if unknown:
        raise click.BadParameter(f"unknown stage(s) {', '.join(validate.preview(s) for s in unknown[:3])}; "
                                 f"choose from {','.join(STAGES)}", param_hint="--only")
    names = host_names(hosts)
    kind = known_backend(load_host(names[0])) if nodes is None and len(names) == 1 else None
    if nodes is not None or (kind is not None and kind.sanity_across_nodes):
        from devenv.cli.sanity_cluster import cluster_sanity

        if dcgm:
            raise BadInput("--dcgm runs on one host, not across a cluster's nodes",
                           "run `devenv sanity NODE --dcgm` against a node's own host profile")
        cluster_sanity(names, nodes, python, as_json, accept_new_host)
        return
    sharing: _Sharing = {"gpus": gpus, "allow_busy": allow_busy, "wait_idle": wait_idle,
                         "dcgm": int(dcgm) if dcgm else None}
    if len(names) > 1 or hosts[0].startswith("@"):
        _sanity_group(names, suite, env, python, on_host, only, inject, no_save, as_json, accept_new_host, sharing)
        return
    host = names[0]
    from devenv.services import sanity_history as history
    from devenv.services.sanity import run_sanity

    stages = tuple(s.strip() for s in only.split(",") if s.strip())
    on_event = None if as_json else _live_printer()
    with open_env(host, env, accept_new_host=accept_new_host) as session:
        target = session.command_target(on_host)
        if not as_json:
            click.echo(f"Running the {suite} sanity suite on {host} ({target.where})...", err=True)
        result = run_sanity(target.conn, python=python or target.python, suite=suite, on_event=on_event,
                            inject=inject, only=stages, host_conn=target.host_conn, container=target.container,
                            among=target.among, on_wait=None if as_json else _say, **sharing)
    previous = history.last_report(host) if compare_last else None
    saved = None if no_save else history.save_report(host, result.report, result.verdict, suite=suite)
    if as_json:
        out = result.to_dict()
        out["saved_to"] = str(saved) if saved else None
        if previous is not None:
            cmp = history.compare(previous, {"host": host, "suite": suite, "report": result.report})
            out["comparison"] = {"a": cmp.a_label, "b": cmp.b_label, "notes": list(cmp.notes),
                                 "rows": [{"metric": r.metric, "unit": r.unit, "a": r.a, "b": r.b,
                                           "ratio": r.ratio, "change": r.change} for r in cmp.rows]}
        emit_json(out)
    else:
        _print_summary(result)
        if compare_last:
            _print_comparison(previous, host, suite, result.report)
        if saved:
            click.echo(f"Report saved to {saved}", err=True)
    if result.verdict.status in EXIT_OF:
        raise SystemExit(EXIT_OF[result.verdict.status])


def _say(text: str) -> None:
    click.echo(click.style(text, dim=True), err=True)


def _sanity_group(names: list[str], suite: str, env: str | None, python: str | None, on_host: bool, only: str,
                  inject: str | None, no_save: bool, as_json: bool, accept_new_host: bool, sharing: _Sharing) -> None:
    """Every host of a group in parallel (no live lines), then a summary per host and the worst exit code."""
    from devenv.services import sanity_history as history
    from devenv.services.sanity import run_sanity

    stages = tuple(s.strip() for s in only.split(",") if s.strip())

    def one(name: str) -> SanityReport:
        with open_env(name, env, accept_new_host=accept_new_host) as session:
            target = session.command_target(on_host)
            result = run_sanity(target.conn, python=python or target.python, suite=suite, on_event=None,
                                inject=inject, only=stages, host_conn=target.host_conn, container=target.container,
                                among=target.among, **sharing)
        if not no_save:
            history.save_report(name, result.report, result.verdict, suite=suite)
        return result

    if not as_json:
        click.echo(f"Running the {suite} sanity suite on {', '.join(names)}...", err=True)
    results = per_host(names, one)
    codes = [err.exit_code if err else EXIT_OF.get(r.verdict.status, 0) if r else 0 for _, r, err in results]
    finish_per_host(results, codes, as_json, lambda r: r.to_dict(), _print_summary)


def _live_printer() -> EventHandler:
    def on_event(event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "progress":
            click.echo(click.style(f"[{event.get('i')}/{event.get('n')}] {event.get('msg')}", dim=True), err=True)
        elif kind == "result":
            for c in event.get("checks") or []:
                print_result(c.as_result(), err=True)
    return on_event


def _print_summary(result: SanityReport) -> None:
    v = result.verdict
    amp = [c for c in v.checks if " AMP: " in c.name and c.status != "info"]
    if amp:
        click.echo("Mixed precision against fp32 / tf32:")
        for c in amp:
            print_result(c.as_result())
    health = [c for c in v.checks if (c.check or "").startswith(HEALTH_IDS) or c.name == "idle co-tenant"]
    if health:   # the GPUs' health, DCGM's tests (or that there is no DCGM), who else held memory
        click.echo("Health:")
        for c in health:
            print_result(c.as_result())
    fails = [c for c in v.checks if c.status in (FAIL, Status.WARN) and c not in health]
    if fails:
        click.echo("Needs attention:")
        for c in fails:
            print_result(c.as_result(), source=True)
    busy = [c for c in v.checks if c.status == NOT_JUDGED]
    if busy:
        click.echo("Not judged (the GPU is unhealthy):" if v.status == UNHEALTHY else
                   "Not judged (the GPU was shared):")
        for c in busy:
            print_result(c.as_result())
    label, color = STATUS_STYLE.get(Status(v.status), (str(v.status).upper(), "cyan"))
    click.echo(f"{click.style(label, fg=color, bold=True)}  {result.host}: {v.summary} ({result.wall_s:.0f} s)")


def _print_comparison(previous: dict[str, Any] | None, host: str, suite: str, report: dict[str, Any]) -> None:
    from devenv.services import sanity_history as history

    if previous is None:
        click.echo("No earlier report of this host to compare with.", err=True)
        return
    cmp = history.compare(previous, {"host": host, "suite": suite, "report": report})
    click.echo(f"Compared with {cmp.a_label}:")
    for note in cmp.notes:
        click.echo(f"  changed: {note}")
    moved = [r for r in cmp.rows if r.change in ("worse", "better")]
    for r in moved:
        color = "red" if r.change == "worse" else "green"
        click.echo(f"  {click.style(r.change.upper(), fg=color)}  {r.metric}: {fmt(r.a)} -> {fmt(r.b)} {r.unit} "
                   f"(x{r.ratio:.2f})")
    if not moved:
        click.echo("  every shared metric within 10% of the last run")
