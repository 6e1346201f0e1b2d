"""`j` in the running monitor against the real test host: an environment brought up with `devenv up`, then the
TUI (real sampler, the CLI's real services) opens the tunnel, and a real Jupyter client runs code through the
URL the dialog shows, while the TUI keeps running; quitting the monitor closes the tunnel."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from env_testing import OWNER, processes_mentioning
from jupyter_client import JupyterClient

from devenv.config.profiles import load_host
from devenv.remote.pool import close_all, get_connection
from devenv.remote.tunnels import close_masters
from devenv.services.monitor import HostSampler
from devenv.services.monitor_wiring import services_for
from devenv.tui.monitor_app import create_monitor_app
from devenv.tui.monitor_screens import JupyterScreen

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]


async def until(pilot, predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        await pilot.pause(0.1)
        if predicate():
            return
    raise AssertionError(f"timed out after {timeout} s waiting for {what}: {pilot.app.notified[-3:]}")


def test_j_in_the_running_monitor_reaches_a_real_jupyter(test_env, monkeypatch):
    env = test_env.name
    up = test_env.run("up", "testbox", "--env", env, "--detach", "--json")
    assert json.loads(up.stdout)["status"]["state"] == "running", up.stderr
    monkeypatch.setenv("DEVENV_OWNER", OWNER)

    profile = load_host("testbox")
    services = services_for({"testbox": profile}, env_choice=env)
    app = create_monitor_app(["testbox"], lambda h: HostSampler(h, lambda: get_connection(profile)), services)
    results: dict = {}

    async def drive() -> None:
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.press("j")
            await until(pilot, lambda: isinstance(app.screen, JupyterScreen), 120, "the Jupyter dialog")
            link = app.screen.link
            assert link.host == "testbox" and link.env == env and link.via in ("openssh", "paramiko")
            await pilot.pause(3)  # the worker that asked for the tunnel is long gone by now
            # a real client, through the URL shown, while the TUI keeps running
            loop = asyncio.get_running_loop()

            def use() -> tuple:
                with JupyterClient(link.url) as jc:
                    kernel = jc.start_kernel()
                    return jc.execute(kernel, "print(6 * 7)"), link
            results["run"], results["link"] = await loop.run_in_executor(None, use)
            await pilot.press("escape", "j")  # again: the same tunnel, checked again
            await until(pilot, lambda: isinstance(app.screen, JupyterScreen), 60, "the dialog again")
            results["again"] = app.screen.link
            await pilot.press("escape", "q")

    try:
        asyncio.run(drive())
    finally:
        close_all()
        close_masters()   # a master outlives its tunnels until exit: the next test has another DEVENV_HOME
    run, link = results["run"], results["link"]
    assert run.status == "ok" and run.stdout == "42\n", run
    assert results["again"].reused and results["again"].local_port == link.local_port
    if link.via == "openssh":
        assert not processes_mentioning(f"127.0.0.1:{link.local_port}:"), "the tunnel outlived the monitor"


def test_a_tunnel_j_holds_says_in_the_monitor_that_it_dropped_and_reconnected(test_env, monkeypatch):
    """The tunnel `j` holds loses its link (its ControlMaster killed): the TUI says so (a warning
    notification, not only the debug log), reconnects on its own, says that too, and the same URL answers."""
    import os
    import signal

    from env_testing import held_masters

    env = test_env.name
    up = test_env.run("up", "testbox", "--env", env, "--detach", "--json")
    assert json.loads(up.stdout)["status"]["state"] == "running", up.stderr
    monkeypatch.setenv("DEVENV_OWNER", OWNER)

    profile = load_host("testbox")
    services = services_for({"testbox": profile}, env_choice=env)
    app = create_monitor_app(["testbox"], lambda h: HostSampler(h, lambda: get_connection(profile)), services)
    results: dict = {}

    def said(fragment: str) -> list:
        return [n for n in app.notified if n[1] == "tunnel to testbox" and fragment in n[2]]

    async def drive() -> None:
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.press("j")
            await until(pilot, lambda: isinstance(app.screen, JupyterScreen), 120, "the Jupyter dialog")
            link = results["link"] = app.screen.link
            await pilot.press("escape")
            [master] = held_masters()
            os.kill(master, signal.SIGKILL)   # the link is gone under the TUI
            await until(pilot, lambda: said("dropped"), 60, "a notification that the tunnel dropped")
            await until(pilot, lambda: said("reconnected to testbox"), 90, "a notification that it reconnected")
            results["dropped"], results["back"] = said("dropped")[0], said("reconnected to testbox")[0]

            def use():
                with JupyterClient(link.url) as jc:
                    return jc.execute(jc.start_kernel(), "print(6 * 7)")
            results["run"] = await asyncio.get_running_loop().run_in_executor(None, use)
            await pilot.press("q")

    try:
        asyncio.run(drive())
    finally:
        close_all()
        close_masters()   # a master outlives its tunnels until exit: the next test has another DEVENV_HOME
    assert results["dropped"][0] == "warning" and results["back"][0] == "information", results
    assert results["run"].status == "ok" and results["run"].stdout == "42\n", results["run"]
    assert not processes_mentioning(f"127.0.0.1:{results['link'].local_port}:"), "the tunnel outlived the monitor"
