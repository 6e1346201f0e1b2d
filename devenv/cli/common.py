"""Options and steps every host command shares: naming hosts, environment choice, host-key acceptance,
connecting, running over several hosts, and the one exit-code contract.

Exit codes (every command): 0 ok, 1 a check or verdict failed, 2 bad input, 3 cannot connect, 4 no GPU proven,
5 GPU shared (sanity's BUSY: speed not judged), 6 a local port is taken (jupyter -p, tunnel LOCAL:PORT), 70 internal
error (a bug). Over several hosts (@group), the most telling code wins: 70, 2, 6, 3, 4, 7, 5, then 1.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import click

from devenv.cli.render import emit_json
from devenv.config import hostref
from devenv.config.profiles import HostProfile
from devenv.errors import DevenvError
from devenv.remote.base import Connection

T = TypeVar("T")
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_CONNECT, EXIT_NO_GPU, EXIT_INTERNAL = 0, 1, 2, 3, 4, 70
EXIT_BUSY = 5
EXIT_PORT_TAKEN = 6  # errors.PortTaken
EXIT_UNHEALTHY = 7  # a GPU is sick (checks.health)
_PRIORITY = (EXIT_INTERNAL, EXIT_BAD_INPUT, EXIT_PORT_TAKEN, EXIT_CONNECT, EXIT_NO_GPU, EXIT_UNHEALTHY, EXIT_BUSY,
             EXIT_FAILED)

env_option = click.option(
    "--env", "-e", "env", metavar="ENV",
    help="Environment profile (default: $DEVENV_ENV, else the host profile's default_env).",
)
accept_new_host_option = click.option(
    "--accept-new-host", is_flag=True,
    help="Trust and record the host key of a host not yet in known_hosts (a changed key is always refused).",
)


def gpus_option(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--gpus: all | none | N (N free GPUs) | 0,1 / device=1 (devenv.gpu.choose), as the canonical string."""
    if value is None:
        return None
    from devenv.gpu.choose import parse_gpus

    try:
        return parse_gpus(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


def connect(host: HostProfile, accept_new_host: bool = False) -> Connection:
    from devenv.remote.envkey import chosen_key
    from devenv.remote.pool import get_connection

    chosen_key()  # a bad $DEVENV_SSH_KEY is bad input (exit 2), said before any connection is tried

    return get_connection(host, accept_new_host=accept_new_host)


def load_host(name: str) -> HostProfile:
    """A host profile, or an ssh alias / user@host[:port] with the bundled defaults (config.hostref)."""
    return hostref.load_host(name)


def host_names(names: tuple[str, ...] | list[str]) -> list[str]:
    """Names with each @group replaced by its hosts."""
    return hostref.expand(list(names))


def worst_exit_code(codes: list[int]) -> int:
    """One exit code for several hosts: 0 when all are 0, else the most telling one (see the module doc)."""
    failing = [c for c in codes if c]
    for code in _PRIORITY:
        if code in failing:
            return code
    return max(failing, default=EXIT_OK)


def finish_per_host(results: list[tuple[str, T | None, DevenvError | None]], codes: list[int], as_json: bool,
                    to_dict: Callable[[T], dict[str, Any]], print_one: Callable[[T], None],
                    verdict: dict[str, Any] | None = None, *, fields: dict[str, Any] | None = None,
                    error_dict: Callable[[str, DevenvError], dict[str, Any]] | None = None,
                    one_line: bool = False) -> None:
    """The end of a command run on several hosts (check, sanity, image push): a JSON object keyed by host (after
    the command's own `fields`; a host's error as error_dict(name, error) gives it), or per host its result or
    its error and hint: a block under a `== host` header, or with one_line a line that names the host (print_one's
    own says it); then the verdict over all of them (when given: its `summary` line; in JSON under "verdict"),
    then the most telling exit code."""
    if as_json:
        error_of = error_dict or (lambda name, err: error_fields(err))
        doc: dict[str, Any] = {"schema_version": 1, **(fields or {}),
                               "hosts": {name: to_dict(r) if r is not None else error_of(name, _given(err))
                                         for name, r, err in results}}
        if verdict is not None:
            doc["verdict"] = verdict
        emit_json(doc)
    else:
        for name, r, err in results:
            if not one_line:
                click.secho(f"== {name}", bold=True)
            if r is not None:
                print_one(r)
            elif err is not None:
                click.secho(f"{name}: {err.message}" if one_line else f"Error: {err.message}", fg="red")
                if err.hint:
                    click.secho(f"  Hint: {err.hint}" if one_line else f"Hint: {err.hint}", fg="yellow")
        if verdict is not None:
            color = {"pass": "green", "unhealthy": "red", "fail": "red"}.get(verdict.get("status", ""))
            click.secho(f"Verdict: {verdict['summary']}", fg=color, bold=True)
    exit_with_worst(codes)


def exit_with_worst(codes: list[int]) -> None:
    """Exit with the most telling of the hosts' codes (worst_exit_code); return when every one is 0."""
    code = worst_exit_code(codes)
    if code:
        raise SystemExit(code)


def _given(err: DevenvError | None) -> DevenvError:
    assert err is not None          # per_host gives a result or an error for every host
    return err


def error_fields(err: DevenvError) -> dict[str, Any]:
    """A host's error in a JSON document: its message, hint and exit code."""
    return {"error": err.message, "hint": err.hint, "exit_code": err.exit_code}


def per_host(names: list[str], work: Callable[[str], T]) -> list[tuple[str, T | None, DevenvError | None]]:
    """work(name) for every host in parallel; a failing host gives its error, and never stops the others. A host's
    error is printed by finish_per_host, not at the CLI's edge: it gets the edge's redaction here (no long value
    the user gave is repeated whole)."""
    from devenv.cli import _ARGS, redact

    ctx = click.get_current_context(silent=True)
    given: list[str] = ctx.meta.get(_ARGS, []) if ctx is not None else []

    def one(name: str) -> tuple[str, T | None, DevenvError | None]:
        try:
            return name, work(name), None
        except DevenvError as e:
            e.message = redact(e.message, given)
            e.hint = redact(e.hint, given) if e.hint else e.hint
            return name, None, e

    with ThreadPoolExecutor(max_workers=min(8, len(names) or 1)) as pool:
        return list(pool.map(one, names))
