"""The monitor TUI with Textual's Pilot: every screen and key. Screens are fed by recorded real samples
(FixedSampler over the H200 recording) or by the real sampler reading the replay; what the keys call is
injected (MonitorServices), so each test sees exactly which service was called for which host."""

from __future__ import annotations

import asyncio
import functools
import os
import socket
import threading
import time

import pytest
from monitor_helpers import (
    REPLAY_DIR,
    T0,
    FixedSampler,
    recorded_snapshot,
    ssh_connection,
)
from rich.console import Console
from sshd_fixture import make_key
from textual.widgets import Input, ProgressBar, RichLog

from devenv.errors import DevenvError
from devenv.remote.local import LocalConnection
from devenv.services.monitor import HostSampler, HostSnapshot
from devenv.services.monitor_jupyter import JupyterLink
from devenv.tui.monitor_app import HostPanel, MonitorServices, create_monitor_app
from devenv.tui.monitor_screens import ConfirmScreen, HelpScreen, JupyterScreen, SanityScreen

pytestmark = pytest.mark.timeout(60)
SIZE = (130, 50)


def run_async(test):
    """Run an async test in its own event loop (the suite has no asyncio plugin)."""
    @functools.wraps(test)
    def wrapper(*args, **kwargs):
        asyncio.run(test(*args, **kwargs))
    return wrapper


def samplers(**snapshots: HostSnapshot):
    made: dict[str, FixedSampler] = {}

    def factory(host: str) -> FixedSampler:
        made[host] = FixedSampler(snapshots[host])
        return made[host]
    return factory, made


def two_hosts():
    down = HostSnapshot("lab-b", "reconnecting", T0, "connection to lab-b (10.0.0.7:22) lost", "retrying in 4.0 s")
    return samplers(**{"h200-box": recorded_snapshot("h200-box"), "lab-b": down})


def panel_text(app, host: str, width: int = 126) -> str:
    panel = next(p for p in app.query(HostPanel) if p.host == host)
    console = Console(width=width, record=True, file=open(os.devnull, "w"))
    console.print(panel.view)
    return console.export_text()


def log_text(app) -> str:
    return "\n".join(strip.text for strip in app.query_one("#logs", RichLog).lines)


async def until(pilot, predicate, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        await pilot.pause(0.02)
        if predicate():
            return
    raise AssertionError(f"timed out waiting for {what}")


def notices(app) -> str:
    return "\n".join(f"{sev} {title}: {msg}" for sev, title, msg in app.notified)


@run_async
async def test_main_screen_shows_hosts_gpus_processes_and_gaps():
    factory, made = two_hosts()
    app = create_monitor_app(["h200-box", "lab-b"], factory, clock=lambda: T0)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: "8× NVIDIA H200" in panel_text(app, "h200-box"), what="the recorded host")
        text = panel_text(app, "h200-box")
        assert "ok" in text and "driver 580.159.04" in text and "sample 0.4 s ago" in text
        for column in ("Util", "Memory", "Temp", "Power", "SM clock", "Throttle", "ECC", "Util history"):
            assert column in text
        assert "sw power cap" in text and "/ 700 W" in text and "/ 1980 MHz" in text
        assert "·" in text, "the recorded gap is drawn in the history"
        assert "gap " in text and "(7 s) connection to h200-box (10.0.0.5:22) lost" in text
        assert "alice" in text and "devenv-cuda" in text and "/opt/torch/.venv/bin/python3" in text
        down = panel_text(app, "lab-b")
        assert "reconnecting" in down and "connection to lab-b (10.0.0.7:22) lost" in down
        assert "retrying in 4.0 s" in down
        assert all(s.started for s in made.values())
        assert app.sub_title == "2 of 2 hosts"
    assert all(s.stopped for s in made.values()), "quitting stops every sampler"


@run_async
async def test_tab_selects_the_next_host_and_the_logs_follow_it():
    factory, _ = two_hosts()
    followed = []

    def follow_logs(host):
        followed.append(host)
        yield f"{host}: container started"
        yield f"{host}: jupyter ready"

    app = create_monitor_app(["h200-box", "lab-b"], factory, MonitorServices(follow_logs=follow_logs))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: "h200-box: jupyter ready" in log_text(app), what="logs of the first host")
        assert app.selected == "h200-box"
        await pilot.press("tab")
        await until(pilot, lambda: "lab-b: jupyter ready" in log_text(app), what="logs of the second host")
        assert app.selected == "lab-b" and "h200-box" not in log_text(app)
        assert app.query_one("#logs").border_title == "logs · lab-b"
        await pilot.press("shift+tab")
        # the follower starts in a worker thread after the selection changed: wait for it, not for the selection
        await until(pilot, lambda: app.selected == "h200-box" and len(followed) >= 3, what="the third follow")
        assert followed == ["h200-box", "lab-b", "h200-box"]


@run_async
async def test_logs_without_a_service_say_so():
    factory, _ = two_hosts()
    app = create_monitor_app(["h200-box", "lab-b"], factory)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: "not available yet" in log_text(app))


@pytest.mark.parametrize("key,what", [("j", "Jupyter"), ("s", "sanity"), ("u", "`up`"), ("d", "`down`")])
@run_async
async def test_keys_without_their_service_say_not_available(key, what):
    factory, _ = two_hosts()
    app = create_monitor_app(["h200-box", "lab-b"], factory)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(key)
        await until(pilot, lambda: "not available yet" in notices(app), what="a notification")
        assert what in notices(app) and "warning" in notices(app)
        assert not isinstance(app.screen, (ConfirmScreen, SanityScreen)), "no dialog for a missing service"


@run_async
async def test_j_shows_the_checked_url_whole_and_opens_it_on_request():
    factory, _ = two_hosts()
    calls, opened = [], []
    url = "http://127.0.0.1:8888/lab?token=" + "ab" * 24

    def open_jupyter(host):
        calls.append(host)
        return JupyterLink(host, "cuda", url, 8888, "openssh", "2.14.2")

    def open_browser(where):
        opened.append(where)
        return "opened in a browser"

    app = create_monitor_app(["h200-box", "lab-b"], factory,
                             MonitorServices(open_jupyter=open_jupyter, open_browser=open_browser))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("tab", "j")
        await until(pilot, lambda: isinstance(app.screen, JupyterScreen), what="the Jupyter dialog")
        screen = app.screen
        assert calls == ["lab-b"]
        assert "Jupyter on lab-b · env cuda" in str(screen.query_one("#title").render())
        shown = "".join(str(screen.query_one("#jupyter-url").render()).split())  # folded at 80 columns
        assert shown == url, "the whole URL, never cut"
        assert "answered on 127.0.0.1:8888" in str(screen.query_one("#jupyter-how").render())
        await pilot.press("c")
        assert app.clipboard == url
        await pilot.press("o")
        await until(pilot, lambda: "opened in a browser" in str(screen.query_one("#jupyter-status").render()))
        assert opened == [url]
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, JupyterScreen))
        assert app.jupyter_links["lab-b"].url == url


@run_async
async def test_j_failure_shows_message_and_hint():
    factory, _ = two_hosts()

    def open_jupyter(host):
        raise DevenvError(f"no environment runs on {host}", "start one with `devenv up`")

    app = create_monitor_app(["h200-box", "lab-b"], factory, MonitorServices(open_jupyter=open_jupyter))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("j")
        await until(pilot, lambda: "no environment runs on h200-box" in notices(app))
        assert "Hint: start one with `devenv up`" in notices(app) and "error" in notices(app)


@run_async
async def test_s_runs_the_sanity_suite_with_live_progress():
    factory, _ = two_hosts()
    release = threading.Event()
    calls = []

    def run_sanity(host, progress):
        calls.append(host)
        progress("matmul bf16: 1 of 2", 0.5)
        release.wait(60)
        progress("train tiny-gpt: 2 of 2", 1.0)
        return "PASS: the GPU delivers what an H200 should"

    app = create_monitor_app(["h200-box", "lab-b"], factory, MonitorServices(run_sanity=run_sanity))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("s")
        await until(pilot, lambda: isinstance(app.screen, SanityScreen))
        screen = app.screen
        await until(pilot, lambda: screen.query_one(ProgressBar).progress == 0.5, what="progress 1/2")
        assert "matmul bf16: 1 of 2" in "\n".join(s.text for s in screen.query_one(RichLog).lines)
        release.set()
        await until(pilot, lambda: "PASS" in str(screen.query_one("#sanity-status").render()), what="the verdict")
        assert calls == ["h200-box"]
        assert "sanity: PASS: the GPU delivers" in panel_text(app, "h200-box", width=300)
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, SanityScreen))


@pytest.mark.parametrize("key,action", [("u", "up"), ("d", "down")])
@run_async
async def test_up_and_down_ask_first_and_yes_runs_them(key, action):
    factory, _ = two_hosts()
    calls = []
    service = lambda host: calls.append(host) or f"{action} done on {host}"  # noqa: E731
    app = create_monitor_app(["h200-box", "lab-b"], factory,
                             MonitorServices(**{action: service}, env_of=lambda h: f"cuda-{h}"))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(key)
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert "environment (env cuda-h200-box) on h200-box?" in app.screen.question, "names host and env"
        await pilot.press("n")
        await until(pilot, lambda: not isinstance(app.screen, ConfirmScreen))
        await pilot.pause(0.2)
        assert calls == [], "'n' runs nothing"
        await pilot.press(key)
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.click("#yes")
        await until(pilot, lambda: f"{action} done on h200-box" in notices(app))
        assert calls == ["h200-box"]


@pytest.mark.parametrize("key", ["u", "d"])
@run_async
async def test_readonly_turns_off_the_keys_that_change_things(key):
    factory, _ = two_hosts()
    calls = []
    app = create_monitor_app(["h200-box", "lab-b"], factory, MonitorServices(
        up=lambda h: calls.append(h) or "", down=lambda h: calls.append(h) or ""), readonly=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(key)
        await until(pilot, lambda: "--readonly" in notices(app), what="the read-only notice")
        assert not isinstance(app.screen, ConfirmScreen) and calls == []


@run_async
async def test_escape_in_the_confirm_dialog_is_no():
    factory, _ = two_hosts()
    calls = []
    app = create_monitor_app(["h200-box", "lab-b"], factory, MonitorServices(down=lambda h: calls.append(h) or ""))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("d")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, ConfirmScreen))
        await pilot.pause(0.2)
        assert calls == []


@run_async
async def test_filter_hides_other_hosts_and_escape_clears_it():
    factory, _ = two_hosts()
    app = create_monitor_app(["h200-box", "lab-b"], factory)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("slash")
        box = app.query_one("#filter", Input)
        assert box.display and box.has_focus
        await pilot.press("l", "a", "b")
        shown = lambda: [p.host for p in app.query(HostPanel) if p.display]  # noqa: E731
        await until(pilot, lambda: shown() == ["lab-b"])
        await pilot.press("enter")
        await until(pilot, lambda: not box.display)
        assert app.selected == "lab-b" and "filter: lab" in app.sub_title and "1 of 2" in app.sub_title
        await pilot.press("slash", "x", "y", "z")
        await until(pilot, lambda: shown() == [] and app.query_one("#no-match").display)
        await pilot.press("escape")
        await until(pilot, lambda: shown() == ["h200-box", "lab-b"])
        assert app.filter_text == "" and app.sub_title == "2 of 2 hosts"


@run_async
async def test_help_opens_and_closes():
    factory, _ = two_hosts()
    app = create_monitor_app(["h200-box", "lab-b"], factory)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen))
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, HelpScreen))


@run_async
async def test_q_quits_stops_the_samplers_and_closes_the_services():
    factory, made = two_hosts()
    closed = []
    app = create_monitor_app(["h200-box", "lab-b"], factory, MonitorServices(close=lambda: closed.append(1)))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("q")
        await pilot.pause(0.1)
        assert not app.is_running
    assert all(s.stopped for s in made.values())
    assert closed == [1], "tunnels opened by j are closed at quit"


@run_async
async def test_logs_that_cannot_be_followed_say_why():
    factory, _ = two_hosts()

    def follow_logs(host):
        raise DevenvError(f"no environment 'cuda' on {host}", "start it with `devenv up`")
        yield  # a generator, like the real one

    app = create_monitor_app(["h200-box", "lab-b"], factory, MonitorServices(follow_logs=follow_logs))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: "[logs stopped: no environment 'cuda' on h200-box]" in log_text(app))


@run_async
async def test_environment_state_and_last_verdict_are_shown():
    factory, _ = two_hosts()
    services = MonitorServices(env_state=lambda h: "running" if h == "h200-box" else "none",
                               last_verdict=lambda h: "FAIL (2026-11-29T09:00)" if h == "lab-b" else None)
    app = create_monitor_app(["h200-box", "lab-b"], factory, services)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: "env: running" in panel_text(app, "h200-box"))
        assert "sanity: none yet" in panel_text(app, "h200-box")
        await until(pilot, lambda: "sanity: FAIL (2026-11-29T09:00)" in panel_text(app, "lab-b"))
        assert "env: none" in panel_text(app, "lab-b")


@run_async
async def test_stays_responsive_while_a_host_hangs(tmp_path):
    """A host that accepts TCP but never speaks SSH, and a status service that takes seconds: keys still
    answer at once, and the other host's GPUs are on screen."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    key = make_key(tmp_path / "id")
    hang = ssh_connection("hung-box", silent.getsockname()[1], key)
    recorded = FixedSampler(recorded_snapshot("h200-box"))

    def factory(host):
        if host == "h200-box":
            return recorded
        return HostSampler(host, lambda: hang, interval=1.0)

    stuck = threading.Event()

    def slow_env_state(host):
        stuck.wait(30)  # a status call that does not return while the test runs
        return "running"

    app = create_monitor_app(["h200-box", "hung-box"], factory, MonitorServices(env_state=slow_env_state))
    try:
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: "8× NVIDIA H200" in panel_text(app, "h200-box"))
            assert "connecting" in panel_text(app, "hung-box")
            await pilot.press("question_mark")
            await until(pilot, lambda: isinstance(app.screen, HelpScreen), what="help while calls hang")
    finally:
        stuck.set()
        silent.close()


@run_async
async def test_real_sampler_on_the_replay(monkeypatch):
    """End to end without SSH: HostSampler over a LocalConnection whose nvidia-smi is the replay."""
    monkeypatch.setenv("PATH", f"{REPLAY_DIR}:{os.environ['PATH']}")
    monkeypatch.setenv("REPLAY_GPUS", "4")
    app = create_monitor_app(["local"], lambda h: HostSampler(h, lambda: LocalConnection(h), interval=0.2,
                                                              process_interval=0.5))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: "4× NVIDIA H200" in panel_text(app, "local"), timeout=15)
        panel = app.query_one(HostPanel)
        # the replay's recorded pid is looked up with this machine's ps, so the command shown is whatever runs
        # here under that pid (or nvidia-smi's name when nothing does): check the list, and its pid on screen
        await until(pilot, lambda: any(p.name == "/opt/torch/.venv/bin/python3" for p in panel.snapshot.processes),
                    timeout=15, what="the processes of the busy GPUs")
        await until(pilot, lambda: str(panel.snapshot.processes[0].pid) in panel_text(app, "local"),
                    what="the process row")
        await until(pilot, lambda: panel.snapshot.host_stats and panel.snapshot.host_stats.cpu_pct is not None,
                    timeout=15, what="the host line's CPU (two frames)")
        text = panel_text(app, "local")
        assert "CPU " in text and f"of {os.cpu_count()}" in text and "RAM " in text and "load " in text
        assert panel.snapshot.state == "ok" and panel.snapshot.samples >= 4
        sampler = app.samplers["local"]
    await asyncio.sleep(0.3)
    assert sampler.snapshot().state == "stopped"
