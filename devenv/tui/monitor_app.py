"""`devenv monitor` as a Textual app. Built by create_monitor_app(), so tests need neither click nor a terminal.

Data flows one way: samplers (services layer, their own threads) -> thread workers that wait for updates ->
typed messages -> widgets. Keys call services through MonitorServices (injected callables) in workers, so a
slow or dead host never blocks the screen. A service that is missing says so in a notification.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from rich.console import RenderableType
from textual import events, on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.notifications import SeverityLevel
from textual.widget import AwaitMount
from textual.widgets import Header, Input, Label, RichLog, Static
from textual.worker import get_current_worker

from devenv.errors import DevenvError
from devenv.gpu.sample import ProcessSample
from devenv.services.environments.slurm.places import FOLLOW_EVERY_S
from devenv.services.monitor import HostSnapshot
from devenv.services.monitor_jupyter import JupyterLink
from devenv.services.monitor_keys import HostChanges as HostChanges  # the app's interface, re-exported
from devenv.services.monitor_keys import MonitorServices as MonitorServices
from devenv.tui.monitor_footer import WrappingFooter
from devenv.tui.monitor_screens import ConfirmScreen, HelpScreen, JupyterScreen, SanityScreen
from devenv.tui.monitor_view import SORTS, HostExtras, flatten, host_view, sorted_processes

EXTRAS_EVERY_S = 15.0


class Sampler(Protocol):
    """What the app needs of a sampler (devenv.services.monitor.HostSampler is one)."""

    def start(self) -> object: ...
    def stop(self, timeout: float = 3.0) -> None: ...
    def snapshot(self) -> HostSnapshot: ...
    def wait_for_update(self, version: int, timeout: float) -> tuple[int, HostSnapshot]: ...


# --- messages (up from workers) -------------------------------------------------------------------------

class HostUpdated(Message):
    def __init__(self, snapshot: HostSnapshot) -> None:
        super().__init__()
        self.snapshot = snapshot


class ExtrasUpdated(Message):
    def __init__(self, host: str, extras: HostExtras) -> None:
        super().__init__()
        self.host, self.extras = host, extras


class LogLine(Message):
    def __init__(self, host: str, line: str) -> None:
        super().__init__()
        self.host, self.line = host, line


class TunnelSaid(Message):
    """A line of a tunnel the keys hold (dropped, reconnecting, reconnected): a notification."""

    def __init__(self, host: str, line: str, trouble: bool) -> None:
        super().__init__()
        self.host, self.line, self.trouble = host, line, trouble


class ActionFinished(Message):
    def __init__(self, host: str, action: str, ok: bool, text: str, result: object = None) -> None:
        super().__init__()
        self.host, self.action, self.ok, self.text, self.result = host, action, ok, text, result


class SanityProgress(Message):
    def __init__(self, host: str, text: str, fraction: float | None) -> None:
        super().__init__()
        self.host, self.text, self.fraction = host, text, fraction


# --- widgets and screens --------------------------------------------------------------------------------

class HostPanel(Static, can_focus=True):
    """One host: state, GPUs with history, processes. Focus selects the host the keys act on."""

    def __init__(self, host: str) -> None:
        super().__init__(id=None, classes="host")
        self.host = host
        self.snapshot: HostSnapshot = HostSnapshot(host, "connecting", 0.0)
        self.extras = HostExtras()
        self.view: RenderableType | None = None
        self.drawn_at = 0.0  # monotonic time of the last redraw
        self.shape: tuple[int, int] | None = None
        self.border_title = host
        self.sort = "gpu"
        self.selected_pid: int | None = None   # the process the kill keys act on

    class Selected(Message):
        def __init__(self, host: str) -> None:
            super().__init__()
            self.host = host

    BINDINGS = [Binding("down,J", "move(1)", "Next process", show=False),
                Binding("up,K", "move(-1)", "Previous process", show=False)]

    def on_focus(self) -> None:
        self.post_message(self.Selected(self.host))

    def selected_process(self) -> ProcessSample | None:
        return next((p for p in self.snapshot.processes if p.pid == self.selected_pid), None)

    def action_move(self, step: int) -> None:
        """Select the next/previous process in the shown order (none selected: the first)."""
        pids = [p.pid for p in sorted_processes(self.snapshot, self.sort)]
        if not pids:
            self.selected_pid = None
        elif self.selected_pid not in pids:
            self.selected_pid = pids[0] if step > 0 else pids[-1]
        else:
            self.selected_pid = pids[(pids.index(self.selected_pid) + step) % len(pids)]
        self.redraw(getattr(self.app, "clock", time.time)())

    def on_resize(self) -> None:
        if self.shape is not None and self.shape[1] != self.content_size.width:  # columns come and go with width
            self.shape = None  # the next update lays the panel out again
            self.call_after_refresh(lambda: self.redraw(getattr(self.app, "clock", time.time)()))

    def redraw(self, now: float) -> None:
        self.set_class(self.snapshot.state != "ok", "unhealthy")
        width = self.content_size.width or self.app.size.width - 4
        self.view = view = host_view(self.snapshot, self.extras, now, width, self.sort, self.selected_pid)
        text = flatten(view, width)
        shape = (text.plain.count("\n"), width)
        self.update(text, layout=shape != self.shape)  # a new layout only when the height changed
        self.shape, self.drawn_at = shape, time.monotonic()


# --- the app --------------------------------------------------------------------------------------------

class MonitorApp(App[None]):
    CSS_PATH = "monitor.tcss"
    TITLE = "devenv monitor"
    # The footer shows these in this order and wraps rather than cuts: help and quit come first, so they are
    # there at any size (tests/test_monitor_layout.py).
    BINDINGS = [
        Binding("question_mark", "help", "Help"),
        Binding("q", "quit", "Quit"),
        Binding("j", "jupyter", "Jupyter"),
        Binding("s", "sanity", "Sanity"),
        Binding("u", "up", "Up"),
        Binding("d", "down", "Down"),
        Binding("slash", "filter", "Filter"),
        Binding("l", "toggle_logs", "Logs"),
        Binding("o", "sort", "Sort"),
        Binding("x", "kill('TERM')", "Terminate"),
        Binding("X", "kill('KILL')", "Kill", show=False),
        Binding("plus,equals_sign", "resize_logs(2)", "Logs +", show=False),
        Binding("minus", "resize_logs(-2)", "Logs -", show=False),
        Binding("escape", "clear_filter", "Clear filter", show=False),
        Binding("r", "runs", "Runs"),
    ]

    def __init__(self, hosts: list[str], sampler_factory: Callable[[str], Sampler],
                 services: MonitorServices | None = None, *, clock: Callable[[], float] = time.time,
                 redraw_every: float = 1.0, readonly: bool = False, watch_every: float = 1.0):
        super().__init__()
        self.readonly = readonly
        self.watch_every = watch_every   # how often the samplers are asked for news (a panel changes at most so often)
        self.hosts = list(dict.fromkeys(hosts))
        self.sampler_factory = sampler_factory
        self.services = services or MonitorServices()
        self.clock = clock
        self.redraw_every = redraw_every
        self.samplers: dict[str, Sampler] = {}
        self.filter_text = ""
        self.selected: str | None = self.hosts[0] if self.hosts else None
        self.logs_host: str | None = None
        self.notified: list[tuple[str, str, str]] = []  # (severity, title, message), newest last
        self.logs_rows: int | None = None   # rows of the logs pane the user chose (None: by terminal size)
        self.jupyter_links: dict[str, JupyterLink] = {}  # host -> the last checked link (its tunnel stays open)

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = True) -> None:
        self.notified = (self.notified + [(severity, title, message)])[-50:]
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=markup)

    # --- layout -------------------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        yield Input(placeholder="filter hosts (enter keeps it, escape clears)", id="filter")
        with VerticalScroll(id="hosts"):
            for host in self.hosts:
                yield HostPanel(host)
            yield Label("no host matches the filter", id="no-match")
        log = RichLog(id="logs", max_lines=500, wrap=False)
        log.border_title = "logs"
        yield log
        yield WrappingFooter()

    # --- size: compact mode and the logs pane -------------------------------------------------------------

    COMPACT_BELOW = (100, 30)  # columns, rows: under either, panels lose padding and the title bar goes

    def on_resize(self, event: events.Resize) -> None:
        self._fit(event.size.width, event.size.height)

    def _fit(self, width: int, height: int) -> None:
        compact = width < self.COMPACT_BELOW[0] or height < self.COMPACT_BELOW[1]
        self.set_class(compact, "compact")
        self.query_one(Header).display = not compact
        if self.logs_rows is None:  # until the user sizes it: by the terminal's height, gone when tiny
            self._show_logs(0 if height < 24 else 5 if height < 40 else 9)

    def _show_logs(self, rows: int) -> None:
        log = self.query_one("#logs", RichLog)
        log.display = rows > 0
        if rows > 0:
            log.styles.height = rows

    def action_toggle_logs(self) -> None:
        log = self.query_one("#logs", RichLog)
        self.logs_rows = 0 if log.display else max(self.logs_rows or 0, 5)
        self._show_logs(self.logs_rows)

    def action_resize_logs(self, delta: int) -> None:
        log = self.query_one("#logs", RichLog)
        current = int(log.styles.height.value) if log.display and log.styles.height else 0
        self.logs_rows = max(0, min(current + delta, max(3, self.size.height - 8)))
        if 0 < self.logs_rows < 3:
            self.logs_rows = 3 if delta > 0 else 0  # a border and one line at least, or nothing
        self._show_logs(self.logs_rows)

    def panels(self) -> list[HostPanel]:
        return list(self.query(HostPanel))

    def panel(self, host: str) -> HostPanel | None:
        return next((p for p in self.panels() if p.host == host), None)

    def on_mount(self) -> None:
        # Textual runs thread workers in the event loop's default executor (min(32, cores + 4) threads):
        # give it room for the long-lived workers plus a few actions running at once on a small laptop.
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=16,
                                                                           thread_name_prefix="monitor"))
        self.query_one("#filter").display = False
        self.query_one("#no-match").display = False
        self._fit(self.size.width, self.size.height)
        self._update_subtitle()
        for host in self.hosts:
            self.samplers[host] = self.sampler_factory(host)
            self.samplers[host].start()
        if self.services.watch_tunnels:   # post_message is thread-safe: the lines come from holder threads
            self.services.watch_tunnels(self._tunnel_said)
        self._watch()
        self._extras()
        self._follow()
        for panel in self.panels():
            panel.redraw(self.clock())
        if self.hosts:
            self.panels()[0].focus()
        self.set_interval(self.redraw_every, self._redraw_all)

    def on_unmount(self) -> None:
        for sampler in self.samplers.values():
            sampler.stop(timeout=0)  # threads are daemons; closing connections ends the remote streams
        if self.services.close:
            self.services.close()

    def _update_subtitle(self) -> None:
        shown = sum(1 for p in self.panels() if p.display)
        self.sub_title = f"{shown} of {len(self.hosts)} hosts" + (f" · filter: {self.filter_text}"
                                                                   if self.filter_text else "")

    # --- workers (threads) -> messages ---------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="watch")
    def _watch(self) -> None:
        """One thread for all hosts: post each host's snapshot when it changed, at most once a watch_every (1 s)."""
        worker = get_current_worker()
        versions: dict[str, int] = {}
        while not worker.is_cancelled:
            for host, sampler in list(self.samplers.items()):   # hosts come and go (_apply_hosts)
                version, snap = sampler.wait_for_update(versions.get(host, -1), timeout=0)
                if version != versions.get(host, -1):
                    versions[host] = version
                    self.post_message(HostUpdated(snap))
            # one redraw per tick: a tick's lines (one per GPU) arrive together, and are drawn together
            deadline = time.monotonic() + min(self.redraw_every, self.watch_every)
            while time.monotonic() < deadline and not worker.is_cancelled:
                time.sleep(0.05)

    @work(thread=True, exclusive=True, group="extras")
    def _extras(self) -> None:
        """Environment state and last verdict of every host, every EXTRAS_EVERY_S, each host in its own
        daemon thread: a slow host delays nobody else, and never holds up quitting."""
        worker = get_current_worker()
        if not (self.services.env_state or self.services.last_verdict):
            return
        running: dict[str, threading.Thread] = {}
        while not worker.is_cancelled:
            for host in list(self.hosts):
                if host in running and running[host].is_alive():
                    continue  # the last round's call for this host is still out
                running[host] = threading.Thread(target=self._extras_of, args=(host,), daemon=True)
                running[host].start()
            deadline = time.monotonic() + EXTRAS_EVERY_S
            while time.monotonic() < deadline and not worker.is_cancelled:
                time.sleep(0.2)

    @work(thread=True, exclusive=True, group="follow")
    def _follow(self) -> None:
        """Every FOLLOW_EVERY_S: the hosts that came and went (a cluster's jobs started or ended since)."""
        worker = get_current_worker()
        if self.services.follow_hosts is None:
            return
        while not worker.is_cancelled:
            deadline = time.monotonic() + FOLLOW_EVERY_S
            while time.monotonic() < deadline and not worker.is_cancelled:
                time.sleep(0.2)
            if worker.is_cancelled:
                return
            try:
                changes = self.services.follow_hosts()
            except DevenvError:
                continue   # a failed look changes nothing; the next one decides
            if changes.added or changes.ended or changes.gone:
                self.call_from_thread(self.apply_hosts, changes)

    def apply_hosts(self, changes: HostChanges) -> None:
        """New panels with started samplers; ended hosts keep their panel, with its last word, and lose their
        sampler (its stream would only reconnect to a job that is gone); dropped rows go."""
        box = self.query_one("#hosts")
        for host in changes.gone:
            panel = self.panel(host)
            if panel is not None:
                panel.remove()
            sampler = self.samplers.pop(host, None)
            if sampler is not None:
                sampler.stop(timeout=0)
            if host in self.hosts:
                self.hosts.remove(host)
        for snapshot in changes.ended:
            sampler = self.samplers.pop(snapshot.host, None)
            if sampler is not None:
                sampler.stop(timeout=0)
            self.on_host_updated(HostUpdated(snapshot))
        for host in changes.added:
            if host in self.hosts:
                continue
            self.hosts.append(host)
            panel = HostPanel(host)
            box.mount(panel, before=self.query_one("#no-match"))
            panel.display = self.filter_text.lower() in host.lower()
            self.samplers[host] = self.sampler_factory(host)
            self.samplers[host].start()
        if changes.added:
            self.notify(f"{len(changes.added)} new node(s): {', '.join(changes.added)}", title="jobs")
        if self.selected not in self.hosts and self.hosts:
            self.selected = self.hosts[0]
        self._update_subtitle()

    def _extras_of(self, host: str) -> None:
        env_state = verdict = None
        try:
            if self.services.env_state:
                env_state = self.services.env_state(host)
            if self.services.last_verdict:
                verdict = self.services.last_verdict(host)
        except DevenvError as e:
            env_state = f"unknown ({e.message})"
        self.post_message(ExtrasUpdated(host, HostExtras(env_state, verdict)))

    @staticmethod
    def _wait_for(target: Callable[[], None]) -> None:
        """Run target in a daemon thread and wait for it while this worker is not cancelled: a call stuck on
        a slow host (a sanity run, `logs -f` with nothing to say) never holds up quitting."""
        worker = get_current_worker()
        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        while thread.is_alive() and not worker.is_cancelled:
            thread.join(0.2)

    def follow_logs(self, host: str) -> None:
        """Point the logs pane at host (the previous host's follower is cancelled)."""
        self.logs_host = host
        log = self.query_one("#logs", RichLog)
        log.clear()
        log.border_title = f"logs · {host}"
        self._logs_worker(host)

    @work(thread=True, exclusive=True, group="logs")
    def _logs_worker(self, host: str) -> None:
        worker = get_current_worker()
        if self.services.follow_logs is None:
            self.post_message(LogLine(host, "following logs is not available yet (no provisioning service)"))
            return
        follow_logs = self.services.follow_logs

        def follow() -> None:
            lines = None
            try:
                lines = follow_logs(host)
                for line in lines:
                    if worker.is_cancelled:
                        break
                    self.post_message(LogLine(host, line))
            except DevenvError as e:
                self.post_message(LogLine(host, f"[logs stopped: {e.message}]"))
            finally:
                close = getattr(lines, "close", None)
                if close:
                    close()  # ends the remote `logs -f`
        self._wait_for(follow)

    def _run_action(self, host: str, action: str, call: Callable[[str], object]) -> None:
        def job() -> None:
            try:
                result = call(host)
                self.post_message(ActionFinished(host, action, True, str(result), result))
            except DevenvError as e:
                self.post_message(ActionFinished(host, action, False,
                                                 e.message + (f"\nHint: {e.hint}" if e.hint else "")))
        self.run_worker(lambda: self._wait_for(job), thread=True, exclusive=True, group=f"{action}:{host}",
                        name=f"{action} {host}")

    # --- message handlers -----------------------------------------------------------------------------------

    def on_host_updated(self, message: HostUpdated) -> None:
        panel = self.panel(message.snapshot.host)
        if panel is None:
            return
        changed = panel.snapshot.state != message.snapshot.state
        panel.snapshot = message.snapshot
        if changed or self._on_screen(panel):  # off-screen panels catch up when scrolled into view
            panel.redraw(self.clock())

    def _on_screen(self, panel: HostPanel) -> bool:
        if not panel.display:
            return False
        scroll = self.query_one("#hosts")
        top = scroll.scroll_offset.y
        region = panel.virtual_region
        return region.y < top + scroll.size.height and region.y + region.height > top

    def on_extras_updated(self, message: ExtrasUpdated) -> None:
        panel = self.panel(message.host)
        if panel is None:
            return
        panel.extras = message.extras
        panel.redraw(self.clock())

    def on_log_line(self, message: LogLine) -> None:
        if message.host == self.logs_host:
            self.query_one("#logs", RichLog).write(message.line)

    def on_action_finished(self, message: ActionFinished) -> AwaitMount | None:
        panel = self.panel(message.host)
        if message.action == "sanity":
            if isinstance(self.screen, SanityScreen) and self.screen.host == message.host:
                self.screen.finished(message.ok, message.text)
            if panel is not None and message.ok:
                panel.extras = HostExtras(panel.extras.env_state, message.text.splitlines()[0])
                panel.redraw(self.clock())
        if message.action == "jupyter" and isinstance(message.result, JupyterLink):
            self.jupyter_links[message.host] = message.result
            return self.push_screen(JupyterScreen(message.result, browser=self.services.open_browser))
        title = f"{message.action} on {message.host}"
        self.notify(message.text, title=title, severity="information" if message.ok else "error",
                    timeout=30 if message.action == "jupyter" else 8, markup=False)
        return None

    def _tunnel_said(self, host: str, line: str, trouble: bool) -> None:
        self.post_message(TunnelSaid(host, line, trouble))

    def on_tunnel_said(self, message: TunnelSaid) -> None:
        self.notify(message.line, title=f"tunnel to {message.host}", markup=False, timeout=8 if message.trouble else 5,
                    severity="warning" if message.trouble else "information")

    def on_sanity_progress(self, message: SanityProgress) -> None:
        if isinstance(self.screen, SanityScreen) and self.screen.host == message.host:
            self.screen.progress(message.text, message.fraction)

    def on_host_panel_selected(self, message: HostPanel.Selected) -> None:
        self.selected = message.host
        if message.host != self.logs_host:
            self.follow_logs(message.host)

    def _redraw_all(self) -> None:
        """Keep ages ("sample 3 s ago") true on panels that no update redrew in the last period."""
        now, fresh = self.clock(), time.monotonic() - self.redraw_every * 0.9
        for panel in self.panels():
            if panel.drawn_at < fresh and self._on_screen(panel):
                panel.redraw(now)

    # --- keys -----------------------------------------------------------------------------------------------

    def _target(self) -> str | None:
        if self.selected is None:
            self.notify("no host selected", severity="warning")
        return self.selected

    def _missing(self, what: str) -> None:
        self.notify(f"{what} is not available yet in this build", title="not available", severity="warning")

    def action_jupyter(self) -> None:
        host = self._target()
        if host is None:
            return
        if self.services.open_jupyter is None:
            return self._missing("Jupyter (tunnel + URL)")
        self.notify(f"opening a tunnel to Jupyter on {host} and checking that it answers…", timeout=5)
        self._run_action(host, "jupyter", self.services.open_jupyter)

    def action_runs(self) -> None:
        """The selected host's detached runs, and a run's log followed (devenv.tui.runs_screen)."""
        host = self._target()
        if host is None:
            return
        if self.services.list_runs is None:
            return self._missing("The runs view")
        from devenv.tui.runs_screen import RunsScreen

        try:
            env = self.services.env_of(host) if self.services.env_of else None
        except DevenvError:
            env = None   # the view says which host; the list's own answer says what is wrong
        self.push_screen(RunsScreen(host, env, self.services.list_runs, self.services.run_tail,
                                    self.services.follow_run, clock=self.clock))

    def action_sanity(self) -> None:
        host = self._target()
        if host is None:
            return
        if self.services.run_sanity is None:
            return self._missing("The sanity suite")
        run = self.services.run_sanity

        def sanity(h: str) -> str:
            def progress(text: str, fraction: float | None = None) -> None:
                self.post_message(SanityProgress(h, text, fraction))
            return run(h, progress)
        self.push_screen(SanityScreen(host))
        self._run_action(host, "sanity", sanity)

    def _env_words(self, host: str) -> str:
        """' (env NAME)' for confirmations: which environment a key acts on, not just which host."""
        if self.services.env_of is None:
            return ""
        try:
            return f" (env {self.services.env_of(host)})"
        except DevenvError as e:
            return f" (env unknown: {e.message})"

    def _confirm_then(self, action: str, question: str, call: Callable[[str], str] | None) -> None:
        host = self._target()
        if host is None:
            return
        if self.readonly:
            self.notify(f"`{action}` is off: the monitor runs with --readonly", title="read-only",
                        severity="warning")
            return
        if call is None:
            return self._missing(f"`{action}`")

        def answered(yes: bool | None) -> None:
            if yes:
                self.notify(f"{action} on {host}…", timeout=3)
                self._run_action(host, action, call)
        self.push_screen(ConfirmScreen(question.format(host=host, env=self._env_words(host))), answered)

    def action_up(self) -> None:
        self._confirm_then("up", "Start the environment{env} on {host}?", self.services.up)

    def action_down(self) -> None:
        self._confirm_then("down", "Stop and remove the environment{env} on {host}? (the workspace volume is kept)",
                           self.services.down)

    def _panel_of_selected(self) -> HostPanel | None:
        return self.panel(self.selected) if self.selected else None

    def action_sort(self) -> None:
        """Sort the selected host's processes by the next key (gpu, memory, cpu, time)."""
        panel = self._panel_of_selected()
        if panel is None:
            return
        panel.sort = SORTS[(SORTS.index(panel.sort) + 1) % len(SORTS)]
        panel.redraw(self.clock())
        self.notify(f"processes on {panel.host} sorted by {panel.sort}", timeout=2)

    def action_kill(self, signal: str) -> None:
        panel = self._panel_of_selected()
        if panel is None:
            return
        if self.readonly:
            self.notify("stopping processes is off: the monitor runs with --readonly", title="read-only",
                        severity="warning")
            return
        proc = panel.selected_process()
        if proc is None:
            self.notify("select a process first (up/down or K/J in the host's panel)", severity="warning")
            return
        if self.services.kill is None:
            return self._missing("Stopping a process")
        kill, host = self.services.kill, panel.host
        command = proc.command or proc.name or "?"
        verb = "Terminate (SIGTERM)" if signal == "TERM" else "Kill (SIGKILL)"
        question = (f"{verb} pid {proc.pid} of {proc.user or '?'} on {host}{self._env_words(host)}?\n"
                    f"{command}")

        def answered(yes: bool | None) -> None:
            if yes:
                self._run_action(host, "kill", lambda h: kill(h, proc.pid, signal, proc.command))
        self.push_screen(ConfirmScreen(question), answered)

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.display = True
        box.focus()

    def action_clear_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.value = ""
        box.display = False
        self._apply_filter("")
        self._focus_first_visible()

    @on(Input.Changed, "#filter")
    def filter_changed(self, event: Input.Changed) -> None:
        self._apply_filter(event.value)

    @on(Input.Submitted, "#filter")
    def filter_submitted(self, event: Input.Submitted) -> None:
        event.input.display = False
        self._focus_first_visible()

    def _apply_filter(self, text: str) -> None:
        self.filter_text = text.strip()
        needle = self.filter_text.lower()
        for panel in self.panels():
            panel.display = needle in panel.host.lower()
        self.query_one("#no-match").display = not any(p.display for p in self.panels())
        self._update_subtitle()

    def _focus_first_visible(self) -> None:
        visible = [p for p in self.panels() if p.display]
        if visible:
            visible[0].focus()
            self.selected = visible[0].host


def create_monitor_app(hosts: list[str], sampler_factory: Callable[[str], Sampler],
                       services: MonitorServices | None = None, *, clock: Callable[[], float] = time.time,
                       redraw_every: float = 1.0, readonly: bool = False, watch_every: float = 1.0) -> MonitorApp:
    """The monitor app for these hosts. sampler_factory(host) -> a sampler that is not started yet.
    readonly: the keys that change things (up, down) say so instead of asking. watch_every: how often the
    samplers are asked for news (1 s: a tick's lines are drawn together; a test stepping a sampler asks sooner)."""
    return MonitorApp(hosts, sampler_factory, services, clock=clock, redraw_every=redraw_every, readonly=readonly,
                      watch_every=watch_every)
