"""The monitor keys' MonitorServices (services/monitor_keys.py) wired to the services of this build (L2):
provisioning (environment state, up, down, logs, Jupyter tunnel + URL) and the sanity suite (live progress, saved
verdicts). The TUI only gets callables, so it never builds a connection; each call opens what it needs through
the pooled connection."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from devenv.config import profiles
from devenv.errors import DevenvError
from devenv.services.monitor_keys import MonitorServices
from devenv.services.session import EnvSession, Tunnel, open_env, resolve_env

if TYPE_CHECKING:
    from devenv.config.profiles import HostProfile
    from devenv.env.runs import Run
    from devenv.services.monitor import JobPlace
    from devenv.services.monitor_jupyter import JupyterLink
    from devenv.services.runs import LogPiece, Runs

Progress = Callable[[str, "float | None"], None]
LOG_TAIL = 100


def services_for(host_profiles: dict[str, HostProfile], accept_new_host: bool = False, env_choice: str | None = None,
                 places: dict[str, JobPlace] | None = None) -> MonitorServices:
    """host_profiles: the monitor's names -> their host profiles (a Slurm job's node -> its cluster's);
    places: the names that are nodes of a Slurm job -> their JobPlace (the keys act on that job's
    environment, and a process is stopped on its node). Both are read at each call: the monitor adds the nodes
    of jobs started after it to them."""
    places = {} if places is None else places

    def env_for(name: str) -> str | None:
        place = places.get(name)
        return env_choice or (place.env if place is not None else None)

    def session(name: str) -> AbstractContextManager[EnvSession]:
        return open_env(host_profiles[name], env_for(name), accept_new_host=accept_new_host)

    def env_name(name: str) -> str:  # for confirmations: no connection needed
        return resolve_env(host_profiles[name], env_for(name)).name

    def env_state(name: str) -> str:
        with session(name) as s:
            found = s.backend.find(s.env.name)
            if not found:
                return f"none ({s.env.name})"
            words = ""
            if s.backend.autostops:   # "running (cuda), stops in 23 m": the watcher's state, one more round trip
                from devenv.services.environments import autostop

                state = s.backend.autostop_states().get(f"{found.owner}-{found.env}")
                words = autostop.row_words(autostop.summary(state, found.running) if state else None)
            return f"{found.state} ({found.env})" + (f", {words}" if words else "")

    def follow_logs(name: str) -> Iterator[str]:
        with session(name) as s:
            yield from s.backend.logs(s.env.name, tail=LOG_TAIL, follow=True)

    def up(name: str) -> str:
        with session(name) as s:  # the same `up` as the CLI's, preflight and ssh entry included
            result = s.up()
        return (f"environment '{s.env.name}' {result.action} in {result.elapsed_s:.0f} s; "
                f"j opens Jupyter, `devenv ssh {name}` a shell")

    def down(name: str) -> str:
        with session(name) as s:
            removed = s.down()
        if not removed.items:
            return f"no environment '{s.env.name}' on {name}: nothing to remove"
        return f"removed {', '.join(removed.items)}; the workspace is kept"

    from devenv.services.monitor_jupyter import TunnelOwner, open_link

    owner = TunnelOwner()  # the app's tunnels live on its thread until quit (see monitor_jupyter)
    said = TunnelLines()   # what the held tunnels say, for the app's listener (a notification each)

    def open_jupyter(name: str) -> JupyterLink:
        from devenv.services import jupyter

        with session(name) as s:
            access = s.backend.jupyter_access(s.env.name)
        local = s.host.local and access.relay is None

        def tunnel(port: int) -> Tunnel:
            opened = s.open_jupyter(access)[1]
            if opened is None:   # only this machine needs none, and it is not asked to open one
                raise DevenvError(f"internal: no tunnel to {name}'s Jupyter", "report this bug")
            return held_in_background(s, name, opened, said)

        return open_link(owner, name, s.env.name, lambda: (access.port, access.token), None if local else tunnel,
                         url_of=jupyter.lab_url)

    def open_browser(url: str) -> str:
        import webbrowser

        if not webbrowser.open(url):
            raise DevenvError("no browser could be started from here", "copy the URL into a browser")
        return "opened in a browser"

    def close() -> None:
        owner.close()

    def kill(name: str, pid: int, signal: str, command: str | None) -> str:
        from devenv.services.monitor import kill_process

        with session(name) as s:
            conn = s.conn
            if name in places:  # the process runs on the job's node: stopped there, through a job step
                from devenv.services.environments.slurm.places import node_connection

                conn = node_connection(s.conn, places[name])
            return kill_process(conn, pid, signal, expect_command=command)

    def runs_in(s: EnvSession) -> Runs:
        from devenv.services.runs import Runs

        return Runs(s.backend, s.env, s.host.name)

    def list_runs(name: str) -> list[Run]:
        with session(name) as s:
            return runs_in(s).list()

    def run_tail(name: str, run_id: str) -> LogPiece:
        with session(name) as s:
            return runs_in(s).tail(run_id)

    def follow_run(name: str, run_id: str, offset: int) -> Iterator[LogPiece]:
        with session(name) as s:   # one session for the whole follow: closed when the caller closes this
            yield from runs_in(s).pieces(run_id, offset)

    services = MonitorServices(env_state=env_state, follow_logs=follow_logs, up=up, down=down,
                               open_jupyter=open_jupyter, open_browser=open_browser, env_of=env_name, kill=kill,
                               close=close, watch_tunnels=said.watch, list_runs=list_runs, run_tail=run_tail,
                               follow_run=follow_run)
    try:
        from devenv.services import sanity, sanity_history
    except ImportError:
        return services

    def run_sanity(name: str, progress: Progress) -> str:
        # where `devenv sanity HOST` runs: in the environment when there is one, with the host's GPUs watched
        with session(name) as s:
            target = s.command_target(host_if_no_env=True)
            result = sanity.run_sanity(target.conn, python=target.python, suite="quick",
                                       on_event=lambda event: _sanity_progress(event, progress),
                                       host_conn=target.host_conn, container=target.container, among=target.among)
        sanity_history.save_report(name, result.report, result.verdict, suite="quick")
        return f"{result.verdict.status.upper()}: {result.verdict.summary}"

    def last_verdict(name: str) -> str | None:
        record = sanity_history.last_report(name)
        if not record:
            return None
        verdict = record.get("verdict") or {}
        return f"{str(verdict.get('status', '?')).upper()} ({str(record.get('saved_at', ''))[:16]})"

    services.run_sanity, services.last_verdict = run_sanity, last_verdict
    return services


def hosts_with_running_env(accept_new_host: bool = False) -> tuple[list[str], list[str]]:
    """(hosts whose environment runs, 'host: why' for hosts that could not be asked), asking every host
    profile in parallel, as `devenv status` does: the hosts are the source of truth."""
    def ask(name: str) -> tuple[str, bool, str | None]:
        try:
            with open_env(profiles.load_host(name), accept_new_host=accept_new_host) as s:
                return name, any(e.running for e in s.backend.status(all_owners=False)), None
        except DevenvError as e:
            return name, False, e.message

    names = profiles.names("hosts")
    with ThreadPoolExecutor(max_workers=min(8, len(names) or 1)) as pool:
        answers = list(pool.map(ask, names))
    return [n for n, running, _ in answers if running], [f"{n}: {why}" for n, _, why in answers if why]


def _sanity_progress(event: dict[str, Any], progress: Progress) -> None:
    """The sanity program's events as one line of text and a fraction done."""
    kind = event.get("event")
    if kind == "progress":
        i, n = event.get("i"), event.get("n")
        fraction = (i / n) if isinstance(i, (int, float)) and isinstance(n, (int, float)) and n else None
        progress(f"{event.get('step', '')}: {event.get('msg', '')}".strip(": "), fraction)
    elif kind == "result":
        checks = event.get("checks") or []
        counts: dict[str, int] = {}
        for c in checks:
            counts[c.status] = counts.get(c.status, 0) + 1
        text = f"  {event.get('check') or event.get('kind')}: " + (", ".join(f"{n} {s}" for s, n in counts.items())
                                                                     or "measured")
        bad = [c.name for c in checks if c.status in ("fail", "warn")]
        progress(text + (f" ({'; '.join(bad)})" if bad else ""), None)
    elif kind == "start":
        progress("started", 0.0)


class TunnelLines:
    """The status lines of the tunnels the monitor's keys hold, passed to the app's listener (set by
    watch()) as (host, line, trouble) and to devenv's log (`--debug-log`). A long outage says "reconnecting
    (attempt N, T s)" every few seconds: the listener gets the first attempt's line and then at most one
    every `every` s a host; "dropped", "reconnected" and every other line always."""

    def __init__(self, every: float = 10.0, clock: Callable[[], float] | None = None) -> None:
        import logging
        import threading
        import time

        self.every = every
        self._clock = clock or time.monotonic
        self._listener: Callable[[str, str, bool], None] | None = None
        self._last_attempt: dict[str, float] = {}
        self._lock = threading.Lock()
        self._log = logging.getLogger("devenv.tunnels")

    def watch(self, listener: Callable[[str, str, bool], None]) -> None:
        self._listener = listener

    def say(self, host: str, line: str) -> None:
        self._log.warning(line)
        trouble = not line.startswith("reconnected")
        with self._lock:
            if line.startswith(f"reconnecting to {host} (attempt"):
                now, last = self._clock(), self._last_attempt.get(host)
                if last is not None and now - last < self.every and "(attempt 1," not in line:
                    return
                self._last_attempt[host] = now
            else:
                self._last_attempt.pop(host, None)
        if self._listener is not None:
            self._listener(host, line, trouble)


def held_in_background(session: EnvSession, host: str, tunnel: Tunnel, said: TunnelLines | None = None) -> Tunnel:
    """The monitor's Jupyter tunnel, held on a thread that reopens it as `devenv jupyter` does (same local
    port, Jupyter found again); its status lines go to `said` (the app's notifications and devenv's log)."""
    from devenv.services.held_tunnel import HeldInBackground, HeldTunnel

    said = said or TunnelLines()

    def reopen(forwards: list[Any]) -> Tunnel:
        opened = session.reopen_jupyter(forwards[0].local_port)[1]
        if opened is None:
            raise DevenvError(f"internal: no tunnel to {host}'s Jupyter", "report this bug")
        return opened

    return HeldInBackground(HeldTunnel(host, tunnel, reopen, lambda line: said.say(host, line),
                                       moved=session.jupyter_moved))
