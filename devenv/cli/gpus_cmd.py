"""`devenv gpus HOST...|@group`: one table of every GPU across hosts: free or whose, memory, utilisation."""

from __future__ import annotations

import click

from devenv.cli import main
from devenv.cli.common import (
    EXIT_CONNECT,
    EXIT_FAILED,
    accept_new_host_option,
    connect,
    exit_with_worst,
    host_names,
    load_host,
)
from devenv.cli.render import emit_json

STATE_EXIT = {"ok": 0, "no-gpu": 0, "error": EXIT_FAILED, "down": EXIT_CONNECT}


@main.command()
@click.argument("hosts", nargs=-1, required=True)
@accept_new_host_option
@click.option("--timeout", "bound_s", type=click.FloatRange(1, 600), default=20, show_default=True,
              help="Seconds to wait for all hosts; one that has not answered by then is shown as down.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document (docs/json.md).")
def gpus(hosts: tuple[str, ...], accept_new_host: bool, bound_s: float, as_json: bool) -> None:
    """Every GPU of HOSTs (profiles, @groups, ssh aliases) in one table: SKU, memory, utilisation, who uses it.

    All hosts are asked at once; one that does not answer within --timeout is shown as down. Exits 3 when a
    host is down, 1 when a host's nvidia-smi fails (the others are still shown); a host without GPUs is no error.
    """
    from devenv.gpu.fleet import COLUMNS, table_rows
    from devenv.services.fleet import look

    profiles = [load_host(name) for name in host_names(hosts)]  # a bad name is bad input (2), before any dial
    found = look(profiles, lambda p: connect(p, accept_new_host), bound_s=bound_s)
    if as_json:
        emit_json({"schema_version": 1, "hosts": [h.to_dict() for h in found]})
    else:
        rows = [COLUMNS, *table_rows(found)]
        widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
        for n, row in enumerate(rows):
            line = "  ".join(cell.ljust(widths[i]) if i < len(row) - 1 else cell for i, cell in enumerate(row))
            click.secho(line, bold=n == 0)
        for h in found:
            if h.state in ("error", "down") and h.hint:
                click.secho(f"{h.host}: {h.reason}", fg="red", err=True)
                click.secho(f"  Hint: {h.hint}", fg="yellow", err=True)
    exit_with_worst([STATE_EXIT.get(h.state, 0) for h in found])
