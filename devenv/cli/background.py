"""`--background` for the commands that hold a tunnel (`tunnel`, `jupyter`): the same command started again as a
process of its own (`--held-as ID`, its own session, its output in a log), which holds the tunnel with the
reconnect loop and keeps its record (services.background_tunnels); this process waits until that one's tunnel
is open (or it failed: its last lines and its exit code), says how to reach and stop it, and exits."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

import click

from devenv.config import paths
from devenv.errors import DevenvError
from devenv.services import background_tunnels as registry
from devenv.services.background_tunnels import TunnelRecord

_F = TypeVar("_F", bound=Callable[..., Any])
START_TIMEOUT = 300.0   # an environment's first Jupyter answer on a slow host fits well under this


def background_options(fn: _F) -> _F:
    fn = click.option("--held-as", "held_as", hidden=True, help="(internal) hold as background tunnel ID")(fn)
    fn = click.option("--background", "-b", is_flag=True,
                      help="Hold the tunnel in a process of its own and return (`devenv tunnels` lists them, "
                           "`devenv tunnels stop ID` ends one).")(fn)
    return fn


def start(tid: str, argv: list[str], as_json: bool) -> None:
    """The background holder of tid: the live one (reused), else `devenv ARGV --held-as TID` started now."""
    record = registry.find(tid)
    if record is not None:
        show(record, as_json, reused=True)
        return
    paths.ensure_private_dir(registry.folder())
    log = registry.log_path(tid)
    with open(log, "wb") as out:
        log.chmod(0o600)
        proc = subprocess.Popen([sys.executable, "-m", "devenv", *argv, "--held-as", tid],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        record = registry.find(tid)
        if record is not None and record.pid == proc.pid and record.state != "starting":
            show(record, as_json, reused=False)
            return
        code = proc.poll()
        if code is not None:
            tail = log.read_text(errors="replace").strip().splitlines()[-8:]
            registry.remove(tid)
            for line in tail:
                click.echo(line, err=True)
            raise SystemExit(code or 70)
        if time.monotonic() > deadline:
            proc.terminate()
            raise DevenvError(f"the background tunnel {tid} did not open within {START_TIMEOUT:.0f} s",
                              f"its log: {log}")
        time.sleep(0.1)


def show(record: TunnelRecord, as_json: bool, reused: bool) -> None:
    if as_json:
        click.echo(json.dumps({"schema_version": 1, **record.to_json(), "reused": reused}))
        return
    click.echo(record.url or ", ".join(f"127.0.0.1:{f['local_port']} -> {record.env}:{f['env_port']}"
                                       for f in record.forwards))
    how = "already held" if reused else "held"
    click.echo(f"{how} in the background as {record.id} (pid {record.pid}); it reconnects by itself. "
               f"`devenv tunnels` lists it, `devenv tunnels stop {record.id}` ends it.", err=True)


def new_record(tid: str, host: str, env: str, what: str, forwards: list[Any], url: str | None) -> TunnelRecord:
    import os

    return TunnelRecord(tid, os.getpid(), host, env, what,
                        [{"local_port": f.local_port, "env_port": f.remote_port} for f in forwards], url)
