"""The monitor's layout at the terminal sizes people use: the key hints wrap instead of being cut (`? Help` and
`q Quit` first, so they are there at 80x24 and below), and a host's message with its hint (the remedy for a
missing driver) wraps instead of being cut, at 160 columns too. Fed by the recorded H200 samples and the test
host's recorded host line."""

from __future__ import annotations

import asyncio
import re

import pytest
from monitor_helpers import T0, FixedSampler, host_stats_of_testbox, recorded_snapshot
from textual.widgets._footer import FooterKey

from devenv.gpu.nvsmi import explain_failure
from devenv.services.monitor import HostSnapshot
from devenv.tui.monitor_app import HostPanel, MonitorApp, MonitorServices, create_monitor_app
from devenv.tui.monitor_footer import WrappingFooter, pack
from devenv.tui.monitor_view import flatten

pytestmark = pytest.mark.timeout(60)
SIZES = [(200, 50), (160, 40), (100, 30), (80, 24), (60, 20)]
DRIVER_HINT = "install the NVIDIA driver, or use a CPU environment (--env cpu)"
MISMATCH = explain_failure("Failed to initialize NVML: Driver/library version mismatch", 18)


def make_app() -> MonitorApp:
    fixed = {
        "h200-box": recorded_snapshot("h200-box"),
        "cpu-box": HostSnapshot("cpu-box", "no-gpu", T0,
                                "cpu-box: no NVIDIA driver: nvidia-smi is not installed on this host", DRIVER_HINT,
                                host_stats=host_stats_of_testbox()),
        # the replay's `mismatch` scenario's words (tests/replay/nvidia-smi): the longest driver hint devenv gives
        "old-driver": HostSnapshot("old-driver", "error", T0, f"old-driver: {MISMATCH[0]}", MISMATCH[1]),
    }
    return create_monitor_app(list(fixed), lambda h: FixedSampler(fixed[h]),
                              MonitorServices(env_state=lambda h: "running"), clock=lambda: T0, redraw_every=3600)


async def shown(pilot) -> None:
    """Every panel has its snapshot and the footer its keys (workers post them a moment after start)."""
    app = pilot.app
    for _ in range(250):
        panels = list(app.query(HostPanel))
        if panels and all(p.snapshot.state != "connecting" for p in panels) and app.query(FooterKey):
            break
        await asyncio.sleep(0.02)
    for panel in app.query(HostPanel):
        panel.redraw(T0)
    for _ in range(3):
        await pilot.pause(0.05)


def test_pack_keeps_order_and_wraps():
    assert pack([8, 8, 8], 30) == [3]
    assert pack([8, 8, 8], 16) == [2, 1]
    assert pack([20, 5], 10) == [1, 1], "a hint wider than the row still gets a row of its own"
    assert pack([], 80) == []


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_every_key_hint_is_whole_on_screen_help_and_quit_first(size):
    async def run() -> None:
        app = make_app()
        async with app.run_test(size=size) as pilot:
            await shown(pilot)
            screen = app.screen.region
            keys = list(app.query(FooterKey))
            assert [k.action for k in keys[:2]] == ["help", "quit"], [k.action for k in keys]
            wanted = {"help", "quit", "jupyter", "sanity", "up", "down", "filter", "toggle_logs", "sort",
                      "kill('TERM')"}
            assert wanted <= {k.action for k in keys}
            for key in keys:
                region = key.region
                # whole: inside the screen, and as wide as its text (nothing cut off at the right edge)
                assert screen.contains_region(region), (key.action, region, screen)
                assert region.width == WrappingFooter._width(key), (key.action, region)
            rows = {k.region.y for k in keys}
            footer = app.query_one(WrappingFooter)
            assert footer.region.height == len(rows) and footer.region.bottom == screen.bottom
            help_key = next(k for k in keys if k.action == "help")
            assert help_key.region.y == min(rows) and help_key.region.x == 0
            if size[0] >= 160:
                assert len(rows) == 1, "a wide terminal keeps the hints on one row"
            else:
                assert len(rows) >= 2 if size[0] <= 80 else True
            # the panels keep room: the hints take at most a few rows
            assert footer.region.height <= 3
    asyncio.run(run())


@pytest.mark.parametrize("size", [(160, 40), (100, 30), (80, 24)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_the_driver_hint_wraps_not_cut(size):
    async def run() -> None:
        app = make_app()
        async with app.run_test(size=size) as pilot:
            await shown(pilot)
            panel = next(p for p in app.query(HostPanel) if p.host == "cpu-box")
            width = panel.content_size.width
            lines = flatten(panel.view, width).plain.splitlines()
            assert all(len(line) <= width for line in lines)
            said = re.sub(r"\s+", " ", " ".join(lines))
            assert f"({DRIVER_HINT})" in said, lines
            assert "…" not in "".join(line for line in lines if "NVIDIA" in line or "cpu" in line)
            mismatch = next(p for p in app.query(HostPanel) if p.host == "old-driver")
            lines = flatten(mismatch.view, mismatch.content_size.width).plain.splitlines()
            said = re.sub(r"\s+", " ", " ".join(lines))
            assert f"({MISMATCH[1]})" in said and MISMATCH[0] in said, lines
            # and the host line of a host without a GPU
            lines = flatten(panel.view, width).plain.splitlines()
            assert any(line.strip().startswith("CPU 100 % of 2  load 5.11  RAM 1.1 / 24 GiB") for line in lines), lines
    asyncio.run(run())


def test_the_host_line_drops_whole_parts_when_narrow():
    from devenv.tui.monitor_view import host_line

    snap = HostSnapshot("cpu-box", "no-gpu", T0, host_stats=host_stats_of_testbox())
    full = host_line(snap, 200)
    assert full is not None and full.plain == ("  CPU 100 % of 2  load 5.11  RAM 1.1 / 24 GiB  swap none  "
                                               "disk /var/lib/docker 31 / 252 GiB")
    for width in (70, 50, 30, 20):
        line = host_line(snap, width)
        assert line is not None and line.cell_len <= width and full.plain.startswith(line.plain)
        assert not line.plain.endswith((" ", "/")), "a part is whole or not there"
    assert host_line(snap, 50).plain == "  CPU 100 % of 2  load 5.11  RAM 1.1 / 24 GiB"
