"""What the monitor's keys call, wired to the services of this build: provisioning (environment state, up,
down, logs, Jupyter tunnel + URL) and the sanity suite (live progress, saved verdicts). The TUI only gets
callables, so it never builds a connection; each call opens what it needs through the pooled connection."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

from devenv.cli.common import connect, resolve_env
from devenv.config import profiles
from devenv.errors import DevenvError
from devenv.tui.monitor_app import MonitorServices

Progress = Callable[[str, "float | None"], None]
LOG_TAIL = 100


def services_for(host_profiles: dict, accept_new_host: bool = False) -> MonitorServices:
    from devenv.cli.envcommon import open_provisioner

    def conn(name: str):
        return connect(host_profiles[name], accept_new_host)

    def env_name(name: str) -> str:
        return resolve_env(host_profiles[name], None).name

    def env_state(name: str) -> str:
        with open_provisioner(host_profiles[name], conn(name), with_key=False) as (prov, _):
            found = prov.find(env_name(name))
        return f"{found.state} ({found.env})" if found else f"none ({env_name(name)})"

    def follow_logs(name: str) -> Iterator[str]:
        with open_provisioner(host_profiles[name], conn(name), with_key=False) as (prov, _):
            yield from prov.logs(env_name(name), tail=LOG_TAIL, follow=True)

    def up(name: str) -> str:
        from devenv.env.image_context import BuildInputs
        from devenv.services import provision
        from devenv.services.preflight import run_check

        profile, env = host_profiles[name], resolve_env(host_profiles[name], None)
        connection = conn(name)
        options = provision.UpOptions(BuildInputs.from_options(None, None, False))
        with open_provisioner(profile, connection) as (prov, key):
            result = prov.up(env, key.public_line if key else "", key.fingerprint if key else "", options=options,
                             preflight=lambda: run_check(connection, profile, env))
        if key and env.sshd and result.host_key and "ssh" in result.status.ports:
            from devenv.cli.ssh_cmd import write_env_entry

            write_env_entry(profile, env.name, result.status.ports["ssh"], result.host_key, key.private_path)
        return (f"environment '{env.name}' {result.action} in {result.elapsed_s:.0f} s; "
                f"j opens Jupyter, `devenv ssh {name}` a shell")

    def down(name: str) -> str:
        with open_provisioner(host_profiles[name], conn(name), with_key=False) as (prov, _):
            removed = prov.down(env_name(name))
        if not removed["containers"]:
            return f"no environment '{env_name(name)}' on {name}: nothing to remove"
        return f"removed {', '.join(removed['containers'])}; the workspace is kept"

    tunnels: list = []
    tunnels_lock = threading.Lock()

    def open_jupyter(name: str) -> str:
        from devenv.cli.envcommon import open_forwards
        from devenv.env.spec import CONTAINER_PORTS
        from devenv.services import jupyter

        profile, env = host_profiles[name], resolve_env(host_profiles[name], None)
        connection = conn(name)
        with open_provisioner(profile, connection, with_key=False) as (prov, _):
            status, token = prov.jupyter_access(env.name)
        if profile.local:  # already on this machine's 127.0.0.1
            return jupyter.lab_url(status.ports["jupyter"], token)
        preferred = env.ports.get("jupyter", CONTAINER_PORTS["jupyter"])
        tunnel = open_forwards(profile, connection, [("jupyter", "127.0.0.1", status.ports["jupyter"], preferred)])
        with tunnels_lock:
            tunnels.append(tunnel)  # open while the monitor runs
        return f"{jupyter.lab_url(tunnel.forwards[0].local_port, token)}  (tunnel open until you quit)"

    def close() -> None:
        with tunnels_lock:
            for tunnel in tunnels:
                tunnel.close()
            tunnels.clear()

    services = MonitorServices(env_state=env_state, follow_logs=follow_logs, up=up, down=down,
                               open_jupyter=open_jupyter, close=close)
    try:
        from devenv.services import sanity, sanity_history
    except ImportError:
        return services

    def run_sanity(name: str, progress: Progress) -> str:
        from devenv.cli.sanity_target import sanity_target

        # where `devenv sanity HOST` runs: in the environment when there is one, with the host's GPUs watched
        with sanity_target(host_profiles[name], conn(name), None, False, host_if_no_env=True) as target:
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
    from devenv.cli.envcommon import open_provisioner

    def ask(name: str) -> tuple[str, bool, str | None]:
        try:
            profile = profiles.load_host(name)
            with open_provisioner(profile, connect(profile, accept_new_host), with_key=False) as (prov, _):
                return name, any(s.running for s in prov.status(all_owners=False)), None
        except DevenvError as e:
            return name, False, e.message

    names = profiles.names("hosts")
    with ThreadPoolExecutor(max_workers=min(8, len(names) or 1)) as pool:
        answers = list(pool.map(ask, names))
    return [n for n, running, _ in answers if running], [f"{n}: {why}" for n, _, why in answers if why]


def _sanity_progress(event: dict, progress: Progress) -> None:
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
