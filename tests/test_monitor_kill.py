"""The kill key's service on a real process of this machine (LocalConnection runs the same shell script an SSH
host would), and the TUI's selection, sort and confirmation (Pilot, recorded samples)."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
from monitor_helpers import T0, FixedSampler, recorded_snapshot, wait_until

from devenv.errors import DevenvError
from devenv.remote.local import LocalConnection
from devenv.services.monitor import kill_process
from devenv.tui.monitor_app import HostPanel, MonitorServices, create_monitor_app
from devenv.tui.monitor_screens import ConfirmScreen

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def sleeper():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait()


def test_terminate_a_real_process_that_still_runs_its_command(sleeper):
    said = kill_process(LocalConnection(), sleeper.pid, "TERM", expect_command=f"{sys.executable} -c import time")
    assert f"sent SIGTERM to {sleeper.pid} (root)" == said
    wait_until(lambda: sleeper.poll() is not None, 10, what="the process to end")
    assert sleeper.returncode == -15


def test_a_pid_that_now_runs_something_else_is_left_alone(sleeper):
    with pytest.raises(DevenvError) as refused:
        kill_process(LocalConnection(), sleeper.pid, "KILL", expect_command="/opt/torch/.venv/bin/python3 train.py")
    assert "now runs something else" in refused.value.message
    assert sleeper.poll() is None


def test_an_ended_process_and_bad_requests():
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    with pytest.raises(DevenvError) as gone:
        kill_process(LocalConnection(), int(done.stdout), "TERM")
    assert "has ended" in gone.value.message
    for pid, signal in ((1, "TERM"), (0, "TERM"), (1234, "HUP"), (1234, "TERM; reboot")):
        with pytest.raises(DevenvError):
            kill_process(LocalConnection(), pid, signal)


def run(test):
    return lambda: asyncio.run(test())


def app_with(kill, readonly=False):
    snap = recorded_snapshot("h200-box")
    return create_monitor_app(["h200-box"], lambda h: FixedSampler(snap), MonitorServices(
        kill=kill, env_of=lambda h: "cuda"), clock=lambda: T0, readonly=readonly)


async def until(pilot, predicate, what):
    for _ in range(250):
        await pilot.pause(0.02)
        if predicate():
            return
    raise AssertionError(f"timed out waiting for {what}")


@run
async def test_select_sort_and_terminate_with_a_confirmation_naming_everything():
    calls = []
    app = app_with(lambda host, pid, signal, command: calls.append((host, pid, signal, command)) or "sent")
    async with app.run_test(size=(160, 50)) as pilot:
        panel = app.query_one(HostPanel)
        await until(pilot, lambda: panel.snapshot.processes, "the processes")
        await pilot.press("x")
        await until(pilot, lambda: any("select a process first" in m for _, _, m in app.notified), "the hint")
        await pilot.press("down")
        first = panel.selected_pid
        assert first == 4243, "the first process in GPU order (GPU 3)"
        await pilot.press("J")
        assert panel.selected_pid == 4242
        await pilot.press("K", "o")
        assert panel.sort == "memory" and panel.selected_pid == 4243
        await pilot.press("x")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirmation")
        question = app.screen.question
        assert "Terminate (SIGTERM) pid 4243 of alice on h200-box (env cuda)?" in question
        assert "/opt/torch/.venv/bin/python3" in question
        await pilot.press("y")
        await until(pilot, lambda: calls, "the kill service")
    assert calls == [("h200-box", 4243, "TERM", None)]


@run
async def test_readonly_never_asks_to_kill():
    calls = []
    app = app_with(lambda *a: calls.append(a) or "", readonly=True)
    async with app.run_test(size=(160, 50)) as pilot:
        panel = app.query_one(HostPanel)
        await until(pilot, lambda: panel.snapshot.processes, "the processes")
        await pilot.press("down", "X")
        await until(pilot, lambda: any("--readonly" in m for _, _, m in app.notified), "the read-only notice")
        assert not isinstance(app.screen, ConfirmScreen) and calls == []
