"""L0 of `devenv monitor`: nvidia-smi's machine formats as recorded on a real H200, NA handling, throttle
reasons, the process stream's frames, container ids from cgroups, history with gaps, and the --once table."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from devenv.gpu import format as gpu_format
from devenv.gpu.sample import (
    GPU_FIELDS,
    Gap,
    GpuHistory,
    GpuSample,
    ProcessSample,
    container_from_cgroup,
    decode_throttle,
    gpu_query_command,
    invalid_field,
    parse_apps_csv,
    parse_apps_frame,
    parse_gpu_csv,
    parse_gpu_line,
    sample_step,
    sparkline,
    time_series,
)
from devenv.services.monitor import HostSnapshot, read_apps_frames

FIX = Path(__file__).parent / "fixtures"
NVSMI = FIX / "nvidia-smi"
MON = FIX / "monitor"


def test_query_fields_match_the_recorded_header():
    """Our field list is the one the fixtures were recorded with (header line of query-gpu_idle_header.csv)."""
    header = (NVSMI / "query-gpu_idle_header.csv").read_text().splitlines()[0]
    names = [h.strip().split(" [")[0] for h in header.split(",")]
    aliases = {"clocks.current.sm": "clocks.sm", "clocks.current.memory": "clocks.mem"}
    assert [aliases.get(n, n) for n in names] == list(GPU_FIELDS)
    assert gpu_query_command().startswith("nvidia-smi --query-gpu=index,uuid,name,")
    assert gpu_query_command(nvidia_smi="/opt/x/nvidia-smi").startswith("/opt/x/nvidia-smi --query-gpu=")


def test_busy_h200_sample():
    [gpu] = parse_gpu_csv((NVSMI / "query-gpu_busy.csv").read_text(), t=123.0)
    assert (gpu.t, gpu.index, gpu.name, gpu.driver_version) == (123.0, 0, "NVIDIA H200", "580.159.04")
    assert (gpu.util_pct, gpu.mem_used_mib, gpu.mem_total_mib, gpu.temp_c) == (100, 1139, 143771, 57)
    assert (gpu.power_w, gpu.power_limit_w, gpu.sm_clock_mhz, gpu.sm_clock_max_mhz) == (689.98, 700.0, 1485, 1980)
    assert gpu.throttle_mask == 0x4 and gpu.throttle_reasons == ("sw power cap",)
    assert gpu.slowed_by == ("sw power cap",)
    assert gpu.ecc_uncorrected == 0 and gpu.pstate == "P0"
    assert gpu.fan_pct is None, "fan.speed is [N/A] on this board: NA, not 0"
    assert gpu.mem_pct == pytest.approx(100 * 1139 / 143771)


def test_idle_h200_sample_is_idle_not_slowed():
    [gpu] = parse_gpu_csv((NVSMI / "query-gpu_idle.csv").read_text(), t=0)
    assert gpu.throttle_reasons == ("idle",)
    assert gpu.slowed_by == ()
    assert (gpu.util_pct, gpu.sm_clock_mhz) == (0, 345)


def test_recorded_stream_goes_idle_busy_idle():
    lines = (MON / "stream_full_lms500.csv").read_text().splitlines()
    samples = [parse_gpu_line(line, float(i)) for i, line in enumerate(lines)]
    assert all(s is not None for s in samples) and len(samples) == 40
    reasons = [s.throttle_reasons for s in samples]
    assert reasons[0] == ("idle",) and ("sw power cap",) in reasons and reasons[-1] == ("idle",)
    busy = [s for s in samples if s.util_pct and s.util_pct >= 99]
    assert 12 <= len(busy) <= 20 and max(s.power_w for s in busy) > 650
    assert [s.t for s in samples] == sorted(s.t for s in samples)


@pytest.mark.parametrize("mask,words", [
    (0x0, ()),
    (0x1, ("idle",)),
    (0x4 | 0x20, ("sw power cap", "sw thermal")),
    (0x8 | 0x40 | 0x80, ("hw slowdown", "hw thermal", "hw power brake")),
    (0x2 | 0x10 | 0x100, ("app clocks", "sync boost", "display clocks")),
    (0x4 | 0x400, ("sw power cap", "0x400")),  # a bit newer than our table is shown, not dropped
    (None, None),
])
def test_throttle_reasons_decoded_with_nvml_bits(mask, words):
    assert decode_throttle(mask) == words


@pytest.mark.parametrize("bad", ["[N/A]", "[Not Supported]", "[Insufficient Permissions]", "[Unknown Error]",
                                 "[GPU is lost]", ""])
def test_unreadable_fields_are_na(bad):
    row = (NVSMI / "query-gpu_busy.csv").read_text().strip().split(", ")
    for i in (8, 10, 11, 20):  # utilization.gpu, temperature.gpu, power.draw, clocks_event_reasons.active
        row[i] = bad
    gpu = parse_gpu_line(", ".join(row), t=1.0)
    assert gpu is not None
    assert (gpu.util_pct, gpu.temp_c, gpu.power_w, gpu.throttle_mask, gpu.throttle_reasons) == (None,) * 5
    assert gpu.mem_used_mib == 1139, "the other fields still parse"


def test_lines_that_are_not_samples_are_skipped():
    assert parse_gpu_line("", 0) is None
    assert parse_gpu_line('Field "bogus.field" is not a valid field to query.', 0) is None
    assert parse_gpu_line("Failed to initialize NVML: Driver/library version mismatch", 0) is None


def test_invalid_field_message_as_recorded():
    text = (NVSMI / "invalid-field.txt").read_text()
    assert invalid_field(text) == "bogus.field"
    assert invalid_field("all fine") is None


def test_compute_apps_as_recorded():
    [proc] = parse_apps_csv((NVSMI / "compute-apps_busy.csv").read_text())
    assert proc == ProcessSample(732, "python3", 1130, "GPU-42db3584-48dc-5258-e66c-9c73d1c5245e")
    assert parse_apps_csv("") == []


def test_compute_apps_stream_and_an_exiting_process():
    """The -lms compute-apps recording ends with '[No data]' as the process exits: NA, not a name."""
    procs = parse_apps_csv((MON / "compute-apps_lms1000.txt").read_text())
    assert procs[0].name == "/opt/torch/.venv/bin/python3" and procs[0].used_mib == 1002
    assert procs[-1].name is None and procs[-1].pid == procs[0].pid


def test_apps_frames_with_users_and_cgroups():
    docker_id = "a" * 12 + "0123456789abcdef" * 3 + "0123"
    lines = [
        "noise before a frame",
        "@apps 0",
        "4242, /usr/bin/python3, 2048, GPU-1",
        "4243, python, 512, GPU-2",
        "@user 4242 alice",
        "@user 4243 root",
        "@cgroup 4242 0::/system.slice/docker-" + docker_id + ".scope",
        "@cgroup 4243 0::/user.slice/user-0.slice/session-3.scope",
        "@end",
        "@apps 0",
        "@end",
        "@apps 127",
        "sh: 1: nvidia-smi: not found",
        "@end",
    ]
    first, empty, failed = list(read_apps_frames(iter(lines)))
    assert first.exit_code == 0 and first.error is None
    assert first.processes[0] == ProcessSample(4242, "/usr/bin/python3", 2048, "GPU-1", "alice", "a" * 12)
    assert first.processes[1].user == "root" and first.processes[1].container is None
    assert empty.processes == () and empty.error is None
    assert failed.exit_code == 127 and "not found" in failed.error and failed.processes == ()


@pytest.mark.parametrize("line,expected", [
    ("0::/system.slice/docker-" + "b" * 64 + ".scope", "b" * 12),           # systemd cgroup driver, v2
    ("12:pids:/docker/" + "c" * 64, "c" * 12),                                # cgroupfs driver, v1
    ("0::/kubepods/burstable/pod1/cri-containerd-" + "d" * 64 + ".scope", "d" * 12),
    ("0::/machine.slice/libpod-" + "e" * 64 + ".scope", "e" * 12),          # podman
    ("0::/user.slice/user-1000.slice/session-2.scope", None),
    ("0::/process_api/9cbb0a1ef577c3822c1d1cca84c053cc", None),              # what the H200 VM showed
])
def test_container_from_cgroup(line, expected):
    assert container_from_cgroup([line]) == expected


def sample(t, util, index=0):
    return GpuSample(t=t, index=index, util_pct=util, mem_used_mib=50, mem_total_mib=100)


def test_history_is_bounded_and_keeps_gaps():
    history = GpuHistory(maxlen=5)
    for t in range(3):
        history.add(sample(float(t), 10 * t))
    history.add_gap(Gap(2.0, 9.0, "connection lost"))
    history.add(sample(9.0, 100))
    # on a time axis (1 s cells, the spacing of the samples): the 7 s gap is 6 empty cells wide, not one dot
    assert history.series("util", 10) == [0, 10, 20, None, None, None, None, None, None, 100]
    assert history.series("mem", 2) == [None, 50.0]
    history.add(sample(10.0, 50))
    assert len(history.points) == 5 and history.latest().t == 10.0
    assert history.series("util", 11)[:2] == [None, 10], "oldest point dropped"


def test_time_series_carries_jitter_but_not_gaps():
    # samples ~1 s apart with jitter: two in one cell, none in the next, is not a gap
    points = tuple(sample(t, u) for t, u in ((0.0, 10), (0.9, 20), (1.95, 30), (2.05, 40), (4.0, 50)))
    assert time_series(points, "util", 5, now=4.5, step=1.0) == [10, 20, 35.0, 35.0, 50]
    # the host went quiet 6 s ago (no Gap recorded yet, the sampler still thinks it may come back)
    assert time_series(points, "util", 8, now=10.5, step=1.0)[-6:] == [None] * 6
    # a recorded Gap is empty even where the surrounding samples are close
    close = (sample(0.0, 10), sample(0.9, 20), sample(3.0, 30))
    assert time_series(close, "util", 4, now=3.5, step=1.0) == [10, 20, 20, 30]
    gap = Gap(0.9, 3.0, "stalled")
    assert time_series((*close[:2], gap, close[2]), "util", 4, now=3.5, step=1.0) == [10, 20, None, 30]


def test_sample_step_is_the_usual_spacing():
    assert sample_step(tuple(sample(t * 0.5, 1) for t in range(9))) == 0.5
    assert sample_step(()) == 1.0


def test_sparkline_draws_gaps_and_na_as_dots_never_as_zero():
    assert sparkline([0, 50, 100], 0, 100) == "▁▅█"
    assert sparkline([0, None, 100], 0, 100) == "▁·█"
    assert sparkline([], 0, 100) == ""
    assert sparkline([150, -5], 0, 100) == "█▁", "clamped to the scale"


def test_once_table_like_gpustat():
    busy = parse_gpu_csv((NVSMI / "query-gpu_busy.csv").read_text(), t=1_796_000_000.0)
    proc = ProcessSample(732, "/usr/bin/python3", 1130, busy[0].uuid, "alice", "devenv-cuda")
    snap = HostSnapshot("h200", "ok", 1_796_000_000.0, gpus=tuple(busy), processes=(proc,),
                        last_sample_t=1_796_000_000.0)
    down = HostSnapshot("gone", "error", 1_796_000_000.0, "connection refused", "is sshd running?")
    text = gpu_format.once_table([snap, down])
    lines = text.splitlines()
    assert lines[0].startswith("h200  ok  driver 580.159.04  ")
    gpu_line = lines[1]
    for part in ("[0] NVIDIA H200", "57°C", "100 %", "1139 / 143771 MiB", "690 / 700 W", "1485 / 1980 MHz",
                 "ECC 0", "sw power cap", "alice:python3/732(1130M)@devenv-cuda"):
        assert part in gpu_line, (part, gpu_line)
    assert lines[2].startswith("gone  error")
    assert "connection refused (hint: is sshd running?)" in lines[3]


def test_once_table_shows_na_as_dash():
    gpu = GpuSample(t=0, index=0, name="X")
    text = gpu_format.once_table([HostSnapshot("h", "ok", 0, gpus=(gpu,), last_sample_t=0)])
    assert "- / - MiB" in text and "- / - W" in text and "ECC -" in text and "| - " in text


def test_apps_frame_with_ps_details():
    frame = parse_apps_frame([
        "@apps 0",
        "4242, /usr/bin/python3, 2048, GPU-1",
        "4243, python, 512, GPU-2",
        "@ps 4242 alice 187.5 10485760 3725 /usr/bin/python3 train.py --lr 3e-4  --name 'a b'",
        "@ps 4243 root 0.0 2048 5",
    ])
    first, second = frame.processes
    assert (first.user, first.cpu_pct, first.rss_kib, first.runtime_s) == ("alice", 187.5, 10485760, 3725)
    assert first.command == "/usr/bin/python3 train.py --lr 3e-4  --name 'a b'", "the whole command line"
    assert (second.user, second.command, second.runtime_s) == ("root", None, 5)


def test_the_process_loop_reports_ps_details_of_a_real_process():
    """The shell loop's ps line, run here for this test's own pid, parsed back."""
    import os
    import subprocess

    from devenv.services.monitor import apps_loop_script, read_apps_frames

    fake = f"printf '%s\\n' '{os.getpid()}, python3, 100, GPU-1'"
    script = apps_loop_script(once=True).replace(
        "nvidia_smi --query-compute-apps=pid,process_name,used_memory,gpu_uuid --format=csv,noheader,nounits", fake)
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30).stdout
    [frame] = read_apps_frames(iter(out.splitlines()))
    [proc] = frame.processes
    assert proc.pid == os.getpid() and proc.rss_kib and proc.rss_kib > 1000 and proc.runtime_s is not None
    # the reference is this process's own argv as the kernel holds it (under pytest-xdist it is not "pytest ...")
    argv = Path(f"/proc/{os.getpid()}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    assert proc.command == " ".join(a.decode() for a in argv) and proc.cpu_pct is not None


def test_the_process_loop_reports_this_hosts_line():
    """The loop's host lines, run on this machine, parsed back; CPU% from two frames' jiffies."""
    import subprocess

    from devenv.gpu.sample import cpu_busy_pct
    from devenv.services.monitor import apps_loop_script, read_apps_frames

    script = apps_loop_script(once=True)
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30).stdout
    [frame] = read_apps_frames(iter(out.splitlines()))
    host = frame.host
    meminfo = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    assert host.mem_total_kib == int(meminfo["MemTotal"].split()[0])
    assert host.ncpu == os.cpu_count() and host.load1 is not None
    assert host.disk_total_kib and host.disk_used_kib is not None and host.disk_mount
    assert len(host.cpu_jiffies) >= 7
    assert host.swap_total_kib == int(meminfo["SwapTotal"].split()[0]) and host.swap_free_kib is not None
    assert host.cpu_pct is not None and 0 <= host.cpu_pct <= 100  # one look: /proc/stat at its start and end
    assert cpu_busy_pct((0, 0, 0, 100, 0), (30, 0, 20, 150, 0)) == 50.0
    assert cpu_busy_pct((), host.cpu_jiffies) is None


def test_host_line_of_a_recorded_frame_and_its_swap():
    """The H200's recorded frame (tests/fixtures/pmon/loop_frames.txt, before swap was read: swap NA) and the
    same frame with the swap lines a host with 8 GiB of swap, 1 GiB in use, prints."""
    from devenv.gpu.format import host_summary
    from devenv.services.monitor import read_apps_frames

    lines = (Path(__file__).parent / "fixtures" / "pmon" / "loop_frames.txt").read_text().splitlines()
    host = next(read_apps_frames(iter(lines))).host
    assert (host.load1, host.ncpu, host.mem_total_kib, host.mem_available_kib) == (0.23, 16, 131961788, 130397776)
    assert host.swap_total_kib is None and host.cpu_pct is None  # one reading of /proc/stat: CPU % needs two
    assert host_summary(host) == "CPU - of 16  load 0.23  RAM 1.5 / 126 GiB  swap -  disk / 16 / 252 GiB"
    at = lines.index("@cpu 1327 0 812 55214 388 0 42 29 0 0")
    swapped = [*lines[:at], "@mem SwapTotal: 8388604", "@mem SwapFree: 7340028", *lines[at:]]
    host = next(read_apps_frames(iter(swapped))).host
    assert (host.swap_used_kib, host.to_dict()["swap_used_kib"]) == (1048576, 1048576)
    assert "swap 1.0 / 8.0 GiB" in host_summary(host)
