"""Pictures of the monitor's screens at a fixed terminal size, fed by the recorded H200 samples
(pytest-textual-snapshot; refresh with `pytest tests/test_monitor_snapshots.py --snapshot-update` and look at
the SVGs before committing them)."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import replace

import pytest
from monitor_helpers import T0, FixedSampler, recorded_snapshot

from devenv.gpu.sample import Gap
from devenv.services.monitor import HostSnapshot
from devenv.tui.monitor_app import HostPanel, MonitorServices, create_monitor_app

pytestmark = pytest.mark.timeout(60)
SIZE = (140, 62)
HOSTS = ["h200-box", "lab-b", "cpu-box"]


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def snapshots() -> dict[str, HostSnapshot]:
    stale = recorded_snapshot("lab-b", n_gpus=2, gap=False, now=T0 - 12)
    lost = Gap(T0 - 12, None, "connection to lab-b (10.0.0.7:22) lost")
    return {
        "h200-box": recorded_snapshot("h200-box"),
        "lab-b": replace(stale, state="reconnecting", t=T0, message=lost.reason, hint="retrying in 8.0 s",
                         gaps=(lost,), last_sample_t=T0 - 12),
        "cpu-box": HostSnapshot("cpu-box", "no-gpu", T0,
                                "cpu-box: no NVIDIA driver: nvidia-smi is not installed on this host",
                                "install the NVIDIA driver, or use a CPU environment (--env cpu)"),
    }


def make_app(services: MonitorServices | None = None):
    fixed = snapshots()
    services = services or MonitorServices(
        env_state=lambda h: {"h200-box": "running", "lab-b": "running", "cpu-box": "none"}[h],
        last_verdict=lambda h: "PASS (2026-11-29T08:12)" if h == "h200-box" else None,
        follow_logs=lambda h: iter([f"[{h}] jupyter server ready on 127.0.0.1:8888",
                                    f"[{h}] epoch 3 step 1200 loss 2.314"]))
    return create_monitor_app(HOSTS, lambda h: FixedSampler(fixed[h]), services, clock=lambda: T0,
                              redraw_every=3600)


async def settled(pilot) -> None:
    """Wait until every panel shows its snapshot (workers post them a moment after start)."""
    app = pilot.app
    for _ in range(200):
        panels = list(app.query(HostPanel))
        if panels and all(p.snapshot.state != "connecting" for p in panels):
            extras = not app.services.env_state or all(p.extras.env_state for p in panels)
            if app.query_one("#logs").lines and extras:
                break
        await asyncio.sleep(0.02)
    for panel in app.query(HostPanel):
        panel.redraw(T0)
    await pilot.pause()


def test_main_screen(snap_compare):
    assert snap_compare(make_app(), terminal_size=SIZE, run_before=settled)


def test_help_screen(snap_compare):
    async def run_before(pilot):
        await settled(pilot)
        await pilot.press("question_mark")
        await pilot.pause()
    assert snap_compare(make_app(), terminal_size=SIZE, run_before=run_before)


def test_confirm_down_dialog(snap_compare):
    services = MonitorServices(down=lambda h: "stopped")
    async def run_before(pilot):
        await settled(pilot)
        await pilot.press("d")
        await pilot.pause()
    assert snap_compare(make_app(services), terminal_size=SIZE, run_before=run_before)


def test_sanity_progress(snap_compare):
    release = threading.Event()

    def run_sanity(host, progress):
        progress("started", 0.0)
        progress("matmul bf16 8192³: 582 TFLOP/s (pass)", 0.25)
        progress("train tiny-gpt amp bf16: loss 5.41 → 0.02 (pass)", 0.5)
        release.wait(1.5)  # the picture is taken long before; then the run ends
        return "PASS"

    async def run_before(pilot):
        await settled(pilot)
        await pilot.press("s")
        for _ in range(200):
            bar = pilot.app.screen.query("#progress")
            if bar and bar.first().progress == 0.5:
                break
            await asyncio.sleep(0.02)
        await pilot.pause()
    try:
        assert snap_compare(make_app(MonitorServices(run_sanity=run_sanity)), terminal_size=SIZE,
                            run_before=run_before)
    finally:
        release.set()


def test_filtered_to_one_host(snap_compare):
    async def run_before(pilot):
        await settled(pilot)
        await pilot.press("slash", "l", "a", "b", "enter")
        await pilot.pause()
    assert snap_compare(make_app(), terminal_size=SIZE, run_before=run_before)
