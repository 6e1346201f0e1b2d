"""What the monitor's keys call (L2): the callables the CLI wires (services/monitor_wiring.py) and the TUI
calls from its workers, so the TUI never builds a connection; and what a look at the followed hosts found."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from devenv.services.monitor import HostSnapshot
from devenv.services.monitor_jupyter import JupyterLink

if TYPE_CHECKING:
    from devenv.env.runs import Run
    from devenv.services.runs import LogPiece


@dataclass
class MonitorServices:
    """What the keys call. Each is None until its service exists; the key then says it is not available.

    run_sanity gets a progress callback (text, fraction 0..1 or None) and returns the verdict line."""

    env_state: Callable[[str], str | None] | None = None
    last_verdict: Callable[[str], str | None] | None = None
    env_of: Callable[[str], str] | None = None   # the environment name the keys act on, for confirmations
    open_jupyter: Callable[[str], JupyterLink] | None = None
    open_browser: Callable[[str], str] | None = None
    run_sanity: Callable[[str, Callable[[str, float | None], None]], str] | None = None
    up: Callable[[str], str] | None = None
    down: Callable[[str], str] | None = None
    follow_logs: Callable[[str], Iterator[str]] | None = None
    # kill(host, pid, "TERM" | "KILL", command it should still run) -> what was done
    kill: Callable[[str, int, str, str | None], str] | None = None
    close: Callable[[], None] | None = None  # called once at quit (closes tunnels the keys opened)
    # the hosts that came and went since the last call (a Slurm cluster's jobs), asked every FOLLOW_EVERY_S
    follow_hosts: Callable[[], HostChanges] | None = None
    # watch_tunnels(listener): the app's listener gets (host, line, trouble) for what a tunnel the keys hold
    # says as it drops and reconnects (called on the holder's thread); trouble: dropped/reconnecting, not back
    watch_tunnels: Callable[[Callable[[str, str, bool], None]], None] | None = None
    # the environment's detached runs (services/runs.py, as `devenv runs` / `logs --run [-f]`): the runs of a host,
    # the last bytes of one run's log (host, run id), and its log from a byte offset as it grows, to its end
    list_runs: Callable[[str], list[Run]] | None = None
    run_tail: Callable[[str, str], LogPiece] | None = None
    follow_run: Callable[[str, str, int], Iterator[LogPiece]] | None = None


@dataclass(frozen=True)
class HostChanges:
    """New hosts (their samplers come from the app's sampler_factory), the last snapshot of hosts that
    ended (a job that no longer runs: its panel stays, saying so, and its sampler stops), rows to drop."""
    added: list[str] = field(default_factory=list)
    ended: list[HostSnapshot] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
