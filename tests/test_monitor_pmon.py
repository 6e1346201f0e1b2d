"""Per-process SM utilisation: `nvidia-smi pmon` as recorded on a real H200 (tests/fixtures/pmon), parsed, folded
into the process stream's frames (the real shell loop, run here with the replay as nvidia-smi), and shown and
sorted in the TUI's process table (Pilot)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from monitor_helpers import REPLAY_DIR, T0, FixedSampler, recorded_snapshot

from devenv.gpu.sample import ProcessSample, parse_apps_frame, parse_pmon, with_sm
from devenv.remote.local import LocalConnection
from devenv.services.monitor import apps_loop_script, read_apps_frames, sample_once
from devenv.tui.monitor_app import HostPanel, create_monitor_app
from devenv.tui.monitor_view import SORTS, flatten, process_table, sorted_processes

pytestmark = pytest.mark.timeout(60)

PMON = Path(__file__).parent / "fixtures" / "pmon"
RECORDED_UUID = "GPU-631a842c-d1c2-3bfd-beac-a3dc0fcc0c97"  # the GPU of tests/fixtures/pmon


def body(name: str) -> list[str]:
    """A recorded output without its command, time and rc lines."""
    lines = (PMON / name).read_text().splitlines()
    assert lines[0].startswith("$ ") and lines[-1].startswith("rc=")
    return lines[2:-1]


def test_pmon_under_three_loads():
    """heavy 480, light 481 (often "-": no utilisation sample in the interval), idle 482 (always "-")."""
    assert parse_pmon(body("load_pmon_u.txt")) == {(0, 480): 99, (0, 481): None, (0, 482): None}
    assert parse_pmon(body("load_pmon_u_d1.txt")) == {(0, 480): 88, (0, 481): 11, (0, 482): None}
    # -s um adds fb and ccpm columns after the utilisations: sm is still found by its header
    assert parse_pmon(body("load_pmon_um.txt")) == {(0, 480): 84, (0, 481): 14, (0, 482): None}
    # a stream stopped by timeout (rc 124): the rows before it count
    assert parse_pmon(body("load_pmon_u_d2_t.txt"))[(0, 480)] == 99


def test_pmon_memory_bandwidth_column():
    """pmon's `mem` (memory bandwidth utilisation, the -s u group's second column), "-" kept as None (no value
    from the driver), found by its header also where -s um puts fb (MB) and ccpm after it."""
    assert parse_pmon(body("load_pmon_u_d1.txt"), "mem") == {(0, 480): 19, (0, 481): 2, (0, 482): None}
    assert parse_pmon(body("load_pmon_um.txt"), "mem") == {(0, 480): 19, (0, 481): 3, (0, 482): None}
    assert parse_pmon(body("load_pmon_um.txt"), "fb")[(0, 482)] == 648  # the MB column is another one
    # the 2026-12-03 recording (/work/shared's h200 set, `pmon -c 5` under a bf16 matmul; no command lines)
    raw = (PMON / "h200_2026-12-03_pmon_c5_load.txt").read_text().splitlines()
    assert parse_pmon(raw, "mem") == {(0, 2604): 24} and parse_pmon(raw) == {(0, 2604): 99}
    for name in ("idle_pmon_u_c1.txt", "idle_pmon_um.txt"):
        assert parse_pmon(body(name), "mem") == {}, name


def test_pmon_without_processes_lists_none():
    for name in ("idle_pmon_u_c1.txt", "idle_pmon_um.txt", "after_pmon_u_c1.txt"):
        assert parse_pmon(body(name)) == {}, name


def test_compute_apps_has_no_sm_field():
    """Why pmon at all: the query refuses an SM field (exit 2), and its help lists none."""
    assert 'Field "sm_util" is not a valid field to query.' in (PMON / "load_bad_field.txt").read_text()
    assert "rc=2" in (PMON / "load_bad_field.txt").read_text()
    assert "util" not in (PMON / "help_apps.txt").read_text()


def frame_lines(pmon_code: int, pmon_out: list[str]) -> list[str]:
    return ["@apps 0", *body("load_apps.txt"), f"@pmon {pmon_code}", *(f"@pm {line}" for line in pmon_out)]


def test_a_frame_with_pmon_gives_each_process_its_sm():
    frame = parse_apps_frame(frame_lines(0, body("load_pmon_u_c1x3.txt")[:5]))  # the first `pmon -c 1`
    assert frame.sm_error is None and frame.sm == {(0, 480): 99, (0, 481): None, (0, 482): None}
    processes = with_sm(frame.processes, frame.sm, {RECORDED_UUID: 0})
    assert [(p.pid, p.used_mib, p.sm_pct) for p in processes] == [(482, 648, None), (481, 1002, None),
                                                                    (480, 1002, 99)]
    # a GPU the sampler does not know (yet): no SM %, rather than a guess
    assert {p.sm_pct for p in with_sm(frame.processes, frame.sm, {})} == {None}
    # the memory bandwidth % of the same pmon rows
    assert frame.membw == {(0, 480): 22, (0, 481): None, (0, 482): None}
    processes = with_sm(frame.processes, frame.sm, {RECORDED_UUID: 0}, frame.membw)
    assert {p.pid: p.membw_pct for p in processes} == {480: 22, 481: None, 482: None}
    assert processes[-1].to_dict()["membw_pct"] == 22


def test_a_failed_pmon_is_said_and_leaves_sm_unknown():
    said = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help."
    frame = parse_apps_frame(frame_lines(2, [said, ""]))
    assert frame.sm == {} and frame.sm_error == said
    assert len(frame.processes) == 3, "the processes are still listed"
    assert parse_apps_frame(frame_lines(9, [])).sm_error == "nvidia-smi pmon exited 9"


@pytest.fixture
def sleepers():
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(8)]
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait()


def replay_env(monkeypatch, tmp_path, **env) -> Path:
    count = tmp_path / "count"
    monkeypatch.setenv("PATH", f"{REPLAY_DIR}:/usr/bin:/bin")
    monkeypatch.setenv("REPLAY_COUNT_FILE", str(count))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return count


def replay_uuids(n: int) -> list[str]:
    listed = subprocess.run([str(REPLAY_DIR / "nvidia-smi"), "-L"], capture_output=True, text=True,
                            env={"REPLAY_GPUS": str(n)}, check=True).stdout
    return [line.split("UUID: ")[1].rstrip(")") for line in listed.splitlines()]


def test_the_loop_asks_pmon_per_four_gpus_in_the_same_stream(monkeypatch, tmp_path, sleepers):
    """8 GPUs with a process each: two `pmon -c 1` (pmon watches at most 4 GPUs), inside the one frame of the
    process stream (no extra SSH session), and every process gets the SM % of its own GPU."""
    apps = tmp_path / "apps.csv"
    uuids = replay_uuids(8)
    apps.write_text("".join(f"{p.pid}, python3, 1002, {u}\n" for p, u in zip(sleepers, uuids)))
    count = replay_env(monkeypatch, tmp_path, REPLAY_GPUS="8", REPLAY_APPS=str(apps), REPLAY_TICK="20")
    snap = sample_once(LocalConnection("box"))
    assert snap.state == "ok" and len(snap.gpus) == 8 and snap.sm_error is None
    started = count.read_text().split()
    assert started.count("pmon") == 2 and started.count("--query-compute-apps") == 1
    util = {g.uuid: g.util_pct for g in snap.gpus}  # the replay's pmon gives each GPU's recorded util as SM %
    assert {p.pid: p.sm_pct for p in snap.processes} == {p.pid: util[u] or None for p, u in zip(sleepers, uuids)}
    assert any(p.sm_pct for p in snap.processes) and any(p.sm_pct is None for p in snap.processes), \
        "busy GPUs give numbers, idle ones the driver's '-'"


def test_recorded_pmon_through_the_real_loop(monkeypatch, tmp_path):
    """The H200's own pmon output (REPLAY_PMON) through the shell loop: 480 gets 99, the light and the idle
    process the driver's "-"."""
    uuid = replay_uuids(1)[0]
    apps = tmp_path / "apps.csv"
    apps.write_text("".join(line.replace(RECORDED_UUID, uuid) + "\n" for line in body("load_apps.txt")))
    replay_env(monkeypatch, tmp_path, REPLAY_APPS=str(apps), REPLAY_PMON=str(PMON / "load_pmon_u_d1.txt"))
    snap = sample_once(LocalConnection("box"))
    assert {p.pid: p.sm_pct for p in snap.processes} == {480: 88, 481: 11, 482: None}
    assert {p.pid: p.membw_pct for p in snap.processes} == {480: 19, 481: 2, 482: None}


def test_an_nvidia_smi_without_pmon(monkeypatch, tmp_path, sleepers):
    apps = tmp_path / "apps.csv"
    apps.write_text(f"{sleepers[0].pid}, python3, 1002, {replay_uuids(1)[0]}\n")
    replay_env(monkeypatch, tmp_path, REPLAY_APPS=str(apps), REPLAY_PMON="off", REPLAY_TICK="20")
    snap = sample_once(LocalConnection("box"))
    assert [p.pid for p in snap.processes] == [sleepers[0].pid] and snap.processes[0].sm_pct is None
    assert "Invalid combination of input arguments" in (snap.sm_error or "")
    assert snap.to_dict()["sm_error"] == snap.sm_error and snap.to_dict()["processes"][0]["sm_pct"] is None
    text = flatten(process_table(snap, snap.t, 160), 160).plain
    assert "SM% and MemBW% -: nvidia-smi pmon: Invalid combination" in text
    assert snap.processes[0].membw_pct is None


def test_no_process_no_pmon(monkeypatch, tmp_path):
    apps = tmp_path / "apps.csv"
    apps.write_text("")
    count = replay_env(monkeypatch, tmp_path, REPLAY_APPS=str(apps))
    frames = list(read_apps_frames(iter(LocalConnection().run(apps_loop_script(once=True)).stdout.splitlines())))
    assert frames and frames[0].processes == () and frames[0].sm == {}
    assert "pmon" not in count.read_text().split()


def with_processes(sm_values: list[int | None]):
    snap = recorded_snapshot("h200-box", gap=False)
    gpu = snap.gpus[3]
    processes = tuple(ProcessSample(5000 + i, "python3", 100 * (i + 1), gpu.uuid, "root", sm_pct=sm,
                                    membw_pct=None if sm is None else sm // 4, command=f"python3 job{i}.py")
                      for i, sm in enumerate(sm_values))
    return replace(snap, processes=processes)


def test_sm_sort_puts_unknown_after_zero():
    snap = with_processes([12, None, 99, 0])
    assert "sm" in SORTS
    assert [p.sm_pct for p in sorted_processes(snap, "sm")] == [99, 12, 0, None]


def run(test):
    return lambda: asyncio.run(test())


@run
async def test_the_sm_column_and_its_sort_in_the_tui():
    snap = with_processes([12, None, 99, 0])
    app = create_monitor_app(["h200-box"], lambda h: FixedSampler(snap), clock=lambda: T0)
    async with app.run_test(size=(160, 50)) as pilot:
        panel = app.query_one(HostPanel)
        for _ in range(250):
            await pilot.pause(0.02)
            if panel.snapshot is not None and panel.snapshot.processes:
                break
        while panel.sort != "sm":
            await pilot.press("o")
        await pilot.press("down")
        assert panel.selected_pid == 5002, "the busiest process first"
        drawn = flatten(panel.view, 156).plain
        assert "SM%▼" in drawn
        rows = [line for line in drawn.splitlines() if "job" in line and "pid 50" not in line]
        assert [row.split("job")[1][0] for row in rows] == ["2", "0", "3", "1"]
        assert rows[0].split()[5] == "99" and rows[-1].split()[5] == "-", "unknown SM shown as -, never 0"
        assert "MemBW%" in drawn and rows[0].split()[6] == "24" and rows[-1].split()[6] == "-"
        await pilot.press("o")
        assert panel.sort == SORTS[(SORTS.index("sm") + 1) % len(SORTS)]


def test_the_loop_as_run_on_the_h200():
    """The process loop itself, run by dash on the H200 under two loads (tests/fixtures/pmon/loop_frames.txt):
    pmon asked by UUID answers, and the heavy process gets 99 %, the light one the driver's "-"."""
    lines = (PMON / "loop_frames.txt").read_text().splitlines()
    frames = list(read_apps_frames(iter(lines)))
    assert len(frames) == 3
    uuid = lines[-1].split(", ")[1]
    for frame in frames:
        assert frame.sm_error is None and frame.me == "root"
        processes = with_sm(frame.processes, frame.sm, {uuid: 0}, frame.membw)
        assert {p.pid: (p.sm_pct, p.user, p.command.split()[-1]) for p in processes} == {
            452: (99, "root", "h"), 453: (None, "root", "l")}
        assert processes[-1 if processes[-1].pid == 452 else 0].membw_pct and \
            [p.membw_pct for p in processes if p.pid == 453] == [None]
