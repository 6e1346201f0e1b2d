"""Pictures of the monitor's screens at a fixed terminal size, fed by the recorded H200 samples
(pytest-textual-snapshot; refresh with `pytest tests/test_monitor_snapshots.py --snapshot-update` and look at
the SVGs before committing them)."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import replace

import pytest
from monitor_helpers import T0, FixedSampler, host_stats_of_testbox, recorded_snapshot

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
                                "install the NVIDIA driver, or use a CPU environment (--env cpu)",
                                host_stats=host_stats_of_testbox()),
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
            logs = app.query_one("#logs")   # hidden on a small terminal: no lines to wait for there
            if (logs.lines or not logs.display) and extras:
                break
        await asyncio.sleep(0.02)
    for panel in app.query(HostPanel):
        panel.redraw(T0)
    await layout_settled(pilot)


async def layout_settled(pilot) -> None:
    """Let the relayout after the redraws reach the scrollbar (its thumb follows the panels' heights)."""
    # The hosts' scrollbar is left out of the pictures: its thumb came out one or the other of two ways from
    # run to run (Textual's timing, not our layout), which made the pictures flaky.
    pilot.app.query_one("#hosts").styles.scrollbar_size_vertical = 0
    for panel in pilot.app.query(HostPanel):
        panel.redraw(pilot.app.clock())
    for _ in range(3):
        await pilot.pause(0.05)
        await pilot.wait_for_scheduled_animations()


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
        release.wait(30)  # the picture is taken long before; then the run ends
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


# --- sizes, and a host that drops and comes back ---------------------------------------------------------

SIZES = {"200x50": (200, 50), "100x30": (100, 30), "80x24": (80, 24), "60x20": (60, 20)}


class Clock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


class DropSampler(FixedSampler):
    """Serves the snapshots it is given one after another, when the test says so (version = the index)."""

    def __init__(self, *snaps: HostSnapshot):
        super().__init__(snaps[0])
        self.snaps, self.i = snaps, 0

    def advance(self) -> None:
        self.i += 1
        self._snapshot = self.snaps[self.i]

    def wait_for_update(self, version: int, timeout: float):
        return self.i, self._snapshot


def came_back(down_at: float, back_at: float, now: float) -> HostSnapshot:
    """h200-box's recording, then no samples from down_at to back_at (a real-width gap), then live again."""
    before = recorded_snapshot("h200-box", now=down_at)
    gap = Gap(down_at, back_at, "connection to h200-box (10.0.0.5:22) lost")
    history = {}
    for k, points in before.history.items():
        samples = [p for p in points if not isinstance(p, Gap)]
        after = [replace(samples[(i * 3) % len(samples)], t=back_at + i) for i in range(int(now - back_at) + 1)]
        history[k] = (*points, gap, *after)
    gpus = tuple(history[k][-1] for k in sorted(history))
    return replace(before, t=now, gpus=gpus, history=history, gaps=(*before.gaps, gap), last_sample_t=now - 0.3,
                   processes_t=now - 1, reconnects=2)


def drop_app(clock: Clock):
    live = recorded_snapshot("h200-box", now=T0)
    lost = Gap(T0 - 0.4, None, "connection to h200-box (10.0.0.5:22) lost")
    down = replace(live, state="reconnecting", t=T0 + 25, message=lost.reason, hint="retrying in 8.0 s",
                   gaps=(*live.gaps, lost), last_sample_t=T0 - 0.4)
    back = came_back(T0 - 0.4, T0 + 31, T0 + 45)
    sampler = DropSampler(live, down, back)
    fixed = snapshots()
    app = create_monitor_app(["h200-box", "lab-b"], lambda h: sampler if h == "h200-box" else FixedSampler(fixed[h]),
                             MonitorServices(env_state=lambda h: f"running ({'cuda' if h == 'h200-box' else 'cpu'})"),
                             clock=clock, redraw_every=3600, watch_every=0.05)   # each step is seen at once
    return app, sampler


async def step_to(pilot, sampler: DropSampler, clock: Clock, now: float, state: str) -> None:
    sampler.advance()
    clock.now = now
    for _ in range(200):
        panel = pilot.app.query(HostPanel).first()
        if panel.snapshot.state == state and panel.extras.env_state:
            break
        await asyncio.sleep(0.02)
    for panel in pilot.app.query(HostPanel):
        panel.redraw(now)
    await layout_settled(pilot)


@pytest.mark.parametrize("size", SIZES)
def test_main_screen_at_size(snap_compare, size):
    assert snap_compare(make_app(), terminal_size=SIZES[size], run_before=settled)


@pytest.mark.parametrize("size", SIZES)
def test_host_drops_stale_values_dimmed(snap_compare, size):
    clock = Clock(T0)
    app, sampler = drop_app(clock)

    async def run_before(pilot):
        await step_to(pilot, sampler, clock, T0 + 25, "reconnecting")
    assert snap_compare(app, terminal_size=SIZES[size], run_before=run_before)


@pytest.mark.parametrize("size", SIZES)
def test_host_comes_back_gap_has_its_width(snap_compare, size):
    clock = Clock(T0)
    app, sampler = drop_app(clock)

    async def run_before(pilot):
        await step_to(pilot, sampler, clock, T0 + 25, "reconnecting")
        await step_to(pilot, sampler, clock, T0 + 45, "ok")
    assert snap_compare(app, terminal_size=SIZES[size], run_before=run_before)


def test_logs_pane_collapsed_and_resized(snap_compare):
    async def run_before(pilot):
        await settled(pilot)
        await pilot.press("minus", "minus", "l", "l", "plus")
        await pilot.pause()
    assert snap_compare(make_app(), terminal_size=SIZES["100x30"], run_before=run_before)


# --- a Slurm cluster: the nodes of the user's jobs, grouped by job -----------------------------------------

def cluster_snapshots() -> dict[str, HostSnapshot]:
    """Two jobs on `gpu-cluster`: an environment's on two nodes (4 replayed H200 each), a sanity job on one;
    and a cluster whose nodes have no GPU (as the CI cluster's)."""
    from devenv.services.monitor import JobPlace

    env_nodes = ("gpu-a01", "gpu-a02")
    places = [JobPlace("gpu-cluster", "4242", "devenv-alice-train", n, env_nodes, "train", "3:41:07")
              for n in env_nodes]
    places.append(JobPlace("gpu-cluster", "4250", "devenv-sanity", "gpu-b07", ("gpu-b07",), None, "0:12:40"))
    found = {p.name: replace(recorded_snapshot(p.name, n_gpus=4, gap=False), job=p) for p in places}
    cpu = JobPlace("cpu-cluster", "17", "devenv-alice-cpu", "node1", ("node1",), "cpu", "29:12")
    found[cpu.name] = HostSnapshot(cpu.name, "no-gpu", T0, f"{cpu.name}: no NVIDIA driver: nvidia-smi is not "
                                   "installed on this host", "install the NVIDIA driver", job=cpu,
                                   host_stats=host_stats_of_testbox())
    return found


def test_cluster_nodes_grouped_by_job(snap_compare):
    fixed = cluster_snapshots()
    app = create_monitor_app(list(fixed), lambda h: FixedSampler(fixed[h]), MonitorServices(), clock=lambda: T0,
                             redraw_every=3600)
    assert snap_compare(app, terminal_size=(140, 90), run_before=settled)


def test_runs_view(snap_compare):
    """Key r: the selected host's runs (newest first), the highlighted run's last lines under them."""
    from devenv.env.runs import Run
    from devenv.services.runs import LogPiece
    from devenv.tui.runs_screen import RunsScreen

    def at(seconds_before: float) -> str:
        return f"{int(T0 - seconds_before):08x}"

    fixed = [
        Run(at(7200) + "a1b2", "baseline", ["python", "train.py", "--lr", "3e-4"], "cuda", "all", None, "exited",
            0, int(T0 - 7200), int(T0 - 3900)),
        Run(at(3000) + "c3d4", None, ["sh", "-c", "python eval.py | tee eval.txt"], "cuda", None, None, "killed",
            143, int(T0 - 3000), int(T0 - 2950)),
        Run(at(600) + "e5f6", "lost-one", ["python", "train.py"], "cuda", None, None, "lost", None, int(T0 - 600)),
        Run(at(95) + "0789", "bf16-lr1e-3", ["python", "train.py", "--lr", "1e-3", "--bf16"], "cuda", "0", "stop",
            "running", None, int(T0 - 95)),
    ]
    log = b"".join(f"step {i * 50} loss {4.2 - i * 0.31:.4f} 612345 tok/s\n".encode() for i in range(1, 12))
    services = MonitorServices(list_runs=lambda h: fixed, run_tail=lambda h, r: LogPiece(log, "running", len(log)),
                               env_of=lambda h: "cuda")

    async def run_before(pilot):
        await settled(pilot)
        await pilot.press("r")
        for _ in range(300):
            screen = pilot.app.screen
            if isinstance(screen, RunsScreen) and screen.loaded and "step 550" in str(
                    screen.query_one("#runs-tail").render()):
                break
            await asyncio.sleep(0.02)
        await pilot.pause()
    assert snap_compare(make_app(services), terminal_size=(120, 36), run_before=run_before)
