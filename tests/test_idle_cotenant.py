"""An idle co-tenant is not contention (issue 26): a process that holds memory but had no SM time in any sample of
a run is named, and the run's speed is judged; one that worked is contention (BUSY), and without pmon nobody can
tell (BUSY, as before).

The frames are the H200's own (tests/fixtures/health/h200-cotenant-*.txt, recorded 2026-12-03): devenv's occupancy
frame and `nvidia-smi pmon` with pid 494 holding 60 GiB at 0 % beside pid 594's bf16 matmul. The recording ran the
frame and pmon one after the other; here each frame gets its pmon answer put where occupancy_script(pmon=True)
prints it (before @end), one pmon sample per frame.
"""

from __future__ import annotations

import json
from pathlib import Path

from devenv.gpu.occupancy import IDLE_SM_PCT, RunIdentity, describe_gpu, foreign, occupancy_script, parse_occupancy
from devenv.sanity.verdict import BUSY, INFO, NOT_JUDGED, PASS, judge_report

FIX = Path(__file__).parent / "fixtures"
UUID = "GPU-8dad656d-56df-2b38-ec2b-03f93b2d1c80"
IDLE, LOAD = 494, 594


def section(name: str, title: str) -> list[str]:
    """The lines under `== title` in a recorded file, up to the next `==`."""
    lines = (FIX / "health" / name).read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"== {title}"))
    out = []
    for line in lines[start + 1:]:
        if line.startswith("== "):
            break
        out.append(line)
    return out


def with_pmon(frame: list[str], pmon: list[str]) -> str:
    assert frame[-1] == "@end"
    return "\n".join(frame[:-1] + ["@pmon 0", *pmon, "@end"]) + "\n"


def alone_frames() -> list[str]:
    """The co-tenant alone: the idle frame with each of its pmon samples (5 %, the fill kernel's tail, then 0, 0)."""
    frame, pmon = section("h200-cotenant-idle.txt", "frame"), section("h200-cotenant-idle.txt", "pmon -c 3")
    return [with_pmon(frame, pmon[:2] + [row]) for row in pmon[2:]]


def load_frames() -> list[str]:
    """The co-tenant beside the matmul: the load frame with each pmon sample (494 '-', 594 99)."""
    frame, pmon = section("h200-cotenant-load.txt", "frame"), section("h200-cotenant-load.txt", "pmon -c 5")
    rows = pmon[2:]
    return [with_pmon(frame, pmon[:2] + rows[k:k + 2]) for k in range(0, len(rows), 2)]


def test_the_frame_carries_each_processes_sm_from_pmon():
    occ = parse_occupancy(load_frames()[0], 1.0)
    assert occ.pmon and {p.pid: p.sm_pct for p in occ.processes} == {IDLE: None, LOAD: 99}
    assert {p.pid: p.used_mib for p in occ.processes} == {IDLE: 62050, LOAD: 1002}
    old = parse_occupancy("\n".join(section("h200-cotenant-load.txt", "frame")), 1.0)  # no pmon asked
    assert not old.pmon and all(p.sm_pct is None for p in old.processes)


def test_the_script_asks_pmon_only_when_told():
    assert "pmon -c 1 -s u -i" in occupancy_script(pmon=True) and "pmon" not in occupancy_script()


def samples(frames: list[str]):
    return [parse_occupancy(f, float(t)) for t, f in enumerate(frames)]


def test_a_process_holding_memory_at_zero_sm_through_the_run_is_idle_and_named():
    run = samples(alone_frames()[1:2] + load_frames())   # before the run: 0 %; during: '-' in every sample
    (sharer,) = foreign(run, RunIdentity(LOAD))[UUID]
    assert sharer.pid == IDLE and sharer.idle and sharer.sm_max == 0 and sharer.sm_samples == 6
    assert describe_gpu(0, [sharer], "also held") == \
        "GPU 0 also held pid 494 (root, python3, 60.6 GiB, at most 0% SM in 6 samples)"


def test_the_fill_kernels_tail_is_near_zero_not_work():
    (sharer,) = foreign(samples(alone_frames() + load_frames()), RunIdentity(LOAD))[UUID]
    assert sharer.sm_max == 5 <= IDLE_SM_PCT and sharer.idle


def test_a_co_tenant_that_works_is_contention():
    (sharer,) = foreign(samples(load_frames()), RunIdentity(IDLE))[UUID]   # the matmul is the other one now
    assert sharer.pid == LOAD and sharer.sm_max == 99 and not sharer.idle


def test_without_pmon_an_idle_looking_process_is_still_contention():
    frame = "\n".join(section("h200-cotenant-load.txt", "frame")) + "\n"
    (sharer,) = foreign(samples([frame, frame, frame]), RunIdentity(LOAD))[UUID]
    assert sharer.sm_samples == 0 and not sharer.idle


def test_one_sample_is_too_few_to_call_it_idle():
    (sharer,) = foreign(samples(load_frames()[:1]), RunIdentity(LOAD))[UUID]
    assert not sharer.idle


def recorded_report() -> dict:
    lines = [json.loads(x) for x in (FIX / "sanity" / "h200-quick.jsonl").read_text().splitlines() if x.strip()]
    return next(e for e in lines if e.get("event") == "report")


def test_the_verdict_judges_speed_beside_an_idle_co_tenant_and_names_it():
    who = "GPU 0 also held pid 494 (root, python3, 60.6 GiB, at most 0% SM in 6 samples)"
    v = judge_report(recorded_report(), idle={0: who})
    assert v.status == PASS and v.summary.endswith(f"; {who}: idle, speed judged")
    assert not [c for c in v.checks if c.status == NOT_JUDGED]
    (note,) = [c for c in v.checks if c.name == "idle co-tenant"]
    assert note.status == INFO and who in note.reason and v.idle == (who,)
    assert note.measured == f"{who}: speed judged"  # shown on its line
    busy = judge_report(recorded_report(), shared={0: "GPU 0 was shared with pid 594 (root, python3)"})
    assert busy.status == BUSY


def test_the_h200s_own_frames_with_pmon_give_the_same_answer():
    """devenv's occupancy_script(pmon=True) as run on the H200 (h200-frames-pmon.txt, 2026-12-03 18:34 UTC):
    pid 1278 holds 60 GiB (5 % SM in the frame right after its fill kernel, '-' beside pid 2210's matmul)."""
    text = (FIX / "health" / "h200-frames-pmon.txt").read_text()
    frames = [f for f in text.split("== frame")[1:]]
    run = [parse_occupancy(f.split("\n", 1)[1], float(t)) for t, f in enumerate(frames)]
    assert all(occ.pmon for occ in run) and len(run) == 4
    (sharer,) = foreign(run, RunIdentity(2210))["GPU-ce00d069-0265-9ade-4eb2-54d3c3dad1d9"]
    assert (sharer.pid, sharer.sm_max, sharer.sm_samples, sharer.idle) == (1278, 5, 4, True)
    (worker,) = foreign(run[1:], RunIdentity(1278))["GPU-ce00d069-0265-9ade-4eb2-54d3c3dad1d9"]
    assert worker.pid == 2210 and worker.sm_max == 99 and not worker.idle
