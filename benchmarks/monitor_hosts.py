#!/usr/bin/env python3
"""Benchmark: N hosts x 8 GPUs at 1 Hz through one devenv process, streaming vs nvidia-smi once per tick.

Hosts are simulated as N separate SSH connections to the test host (testhost/setup: sshd on 127.0.0.1:2201,
as the unprivileged `testbox-nodocker` login, whose shell startup is a plain Debian one), each running the
nvidia-smi REPLAY (tests/replay/nvidia-smi, REPLAY_GPUS=8) from a private copy, so every remote process of the
run can be found by its path. Two ways to sample, same data, same 1 s tick:

  stream  devenv's HostSampler: one `nvidia-smi --query-gpu ... -lms 1000` per host for the whole run, and one
          shell loop listing compute processes every 5 s (with `nvidia-smi pmon -c 1` per 4 GPUs that have one).
  tick    the naive way: every second a new SSH exec of `nvidia-smi --query-gpu ...` per host (every 5th tick
          also the compute-apps listing), as a once-per-tick poller would.
  tui     `stream` plus the Textual monitor app drawing every host (headless, 160x60): what the screen costs.

Measured over the window (after a warm-up):
  laptop CPU per host   this process's user+sys CPU time / window / N (all threads: paramiko, parsing, samplers)
  remote CPU per sample CPU time of our sshd sessions and everything they ran (live and reaped), / GPU samples
  remote processes      long-lived per host (median of 20 Hz looks at the process table) and launched per host
                        per minute (SSH exec sessions from sshd's log + replay invocations it counted itself)

    source .testhost/env && python3 benchmarks/monitor_hosts.py --hosts 1 4 16 --seconds 30
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from devenv.config.profiles import HostProfile, SSHTarget  # noqa: E402
from devenv.gpu.sample import parse_gpu_csv  # noqa: E402
from devenv.remote.pool import close_all, get_connection  # noqa: E402
from devenv.services.monitor import HostSampler, apps_loop_script, gpu_query_command  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
ALIAS = "testbox-nodocker"
USER = "devenv-nodocker"


def private_replay() -> Path:
    """A copy of the replay and its recordings in a fresh world-readable folder: its path marks our processes."""
    root = Path(tempfile.mkdtemp(prefix="devenv-bench-"))
    root.chmod(0o755)
    shutil.copytree(REPO / "tests" / "replay", root / "replay")
    for sub in ("nvidia-smi", "monitor"):
        shutil.copytree(REPO / "tests" / "fixtures" / sub, root / "fixtures" / sub)
    count = root / "count"
    count.touch()
    count.chmod(0o666)
    for path in root.rglob("*"):
        path.chmod(path.stat().st_mode | 0o044 | (0o011 if path.is_dir() else 0))
    return root


def proc_stat(pid: int) -> tuple[int, int, float] | None:
    """(ppid, own ticks, reaped children's ticks) of a live process."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14])


def process_table() -> dict[int, tuple[int, str]]:
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            table[int(entry.name)] = (ppid, cmd)
    return table


def sessions_of_user(table) -> set[int]:
    """sshd's per-connection processes for our login ('sshd: devenv-nodocker [priv]' and '...@notty')."""
    return {pid for pid, (_, cmd) in table.items() if cmd.startswith(f"sshd: {USER}")}


def tree_cpu_s(roots: set[int]) -> float:
    """CPU seconds of each root and all it ran: own + reaped children + live descendants, recursively."""
    table = {pid: proc_stat(pid) for pid in map(int, (p.name for p in Path("/proc").iterdir() if p.name.isdigit()))}
    children: dict[int, list[int]] = {}
    for pid, st in table.items():
        if st:
            children.setdefault(st[0], []).append(pid)

    def total(pid: int) -> int:
        st = table.get(pid)
        if not st:
            return 0
        return st[1] + st[2] + sum(total(c) for c in children.get(pid, []))
    # a root that is a descendant of another root is counted once, through its ancestor
    tops = {r for r in roots if not any(r in _descendants(o, children) for o in roots if o != r)}
    return sum(total(r) for r in tops) / CLK_TCK


def _descendants(pid: int, children) -> set[int]:
    out, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.add(c)
            todo.append(c)
    return out


def sshd_exec_sessions(log: Path) -> int:
    try:
        return log.read_text(errors="replace").count(f"Starting session: command for {USER}")
    except OSError:
        return 0


class Watcher(threading.Thread):
    """Looks at the process table 20 times a second: how many of our processes are alive at once."""

    def __init__(self, marker: str):
        super().__init__(daemon=True)
        self.marker, self.counts, self.stop = marker, [], threading.Event()
        self.cpu_s = 0.0  # this thread's own CPU, taken out of the laptop figure

    def run(self) -> None:
        start = time.thread_time()
        while not self.stop.wait(0.05):
            self.counts.append(sum(1 for _, cmd in process_table().values() if self.marker in cmd))
            self.cpu_s = time.thread_time() - start


def run_app(samplers: list[HostSampler], stop: threading.Event, done: threading.Event) -> None:
    """The monitor app over these samplers, headless, until stop is set (it starts and stops them)."""
    import asyncio

    from devenv.tui.monitor_app import create_monitor_app
    by_name = {s.host: s for s in samplers}

    async def main() -> None:
        app = create_monitor_app(list(by_name), by_name.__getitem__)
        async with app.run_test(size=(160, 60)) as pilot:
            while not stop.is_set():
                await pilot.pause(0.2)
        done.set()
    asyncio.run(main())


def run_mode(mode: str, n: int, seconds: float, warmup: float, replay_root: Path, log: Path) -> dict:
    replay = (f"env REPLAY_GPUS=8 REPLAY_DATA={replay_root}/fixtures REPLAY_COUNT_FILE={replay_root}/count "
              f"{replay_root}/replay/nvidia-smi")
    before_sessions = sessions_of_user(process_table())
    profiles = [HostProfile(name=f"sim-{mode}-{i}", source="bench", ssh=SSHTarget(alias=ALIAS)) for i in range(n)]
    conns = [get_connection(p) for p in profiles]
    for conn in conns:
        conn.run("true", timeout=60)  # connect and authenticate before the clock starts
    samples = [0] * n
    stop = threading.Event()
    threads: list[threading.Thread] = []
    samplers: list[HostSampler] = []
    app_done = threading.Event()
    if mode in ("stream", "tui"):
        for conn in conns:
            samplers.append(HostSampler(conn.name, lambda c=conn: c, interval=1.0, process_interval=5.0,
                                        nvidia_smi=replay))
        if mode == "stream":
            for sampler in samplers:
                sampler.start()
        else:
            threads.append(threading.Thread(target=run_app, args=(samplers, stop, app_done), daemon=True))
            threads[-1].start()
    else:
        def poll(i: int, conn) -> None:
            tick, next_t = 0, time.time()
            while not stop.is_set():
                result = conn.run(gpu_query_command(nvidia_smi=replay), timeout=30)
                samples[i] += len(parse_gpu_csv(result.stdout, time.time()))
                if tick % 5 == 0:
                    conn.run(apps_loop_script(replay, once=True), timeout=30)
                tick += 1
                next_t += 1.0
                stop.wait(max(0.0, next_t - time.time()))
        for i, conn in enumerate(conns):
            threads.append(threading.Thread(target=poll, args=(i, conn), daemon=True))
            threads[-1].start()

    def gpu_samples() -> int:
        return sum(s.snapshot().samples for s in samplers) if samplers else sum(samples)

    time.sleep(warmup)
    ours = sessions_of_user(process_table()) - before_sessions
    watcher = Watcher(str(replay_root))
    watcher.start()
    count_file = replay_root / "count"
    # the measuring itself (reading /proc) stays outside the laptop figure: remote first, then our rusage
    remote0 = tree_cpu_s(ours)
    execs0, launches0 = sshd_exec_sessions(log), len(count_file.read_text().splitlines())
    pmons0 = count_file.read_text().split().count("pmon")
    r0, samples0, t0 = resource.getrusage(resource.RUSAGE_SELF), gpu_samples(), time.monotonic()
    time.sleep(seconds)
    r1, samples1, elapsed = resource.getrusage(resource.RUSAGE_SELF), gpu_samples(), time.monotonic() - t0
    watcher.stop.set()
    watcher.join(2)
    remote1 = tree_cpu_s(ours)
    execs1, launches1 = sshd_exec_sessions(log), len(count_file.read_text().splitlines())
    pmons1 = count_file.read_text().split().count("pmon")
    stop.set()
    for s in samplers:
        s.stop(timeout=2)
    for t in threads:
        t.join(5)
    close_all()
    laptop = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime) - watcher.cpu_s
    remote = remote1 - remote0
    got = samples1 - samples0
    return {
        "mode": mode, "hosts": n, "seconds": round(elapsed, 1), "gpu_samples": got,
        "samples_per_host_per_s": round(got / n / elapsed, 2),
        "laptop_cpu_pct_per_host": round(100 * laptop / elapsed / n, 2),
        "laptop_cpu_ms_per_sample": round(1000 * laptop / max(got, 1), 3),
        "remote_cpu_ms_per_sample": round(1000 * remote / max(got, 1), 3),
        "remote_cpu_pct_per_host": round(100 * remote / elapsed / n, 2),
        "remote_long_lived_procs_per_host": round(statistics.median(watcher.counts) / n, 2) if watcher.counts else None,
        "ssh_execs_per_host_per_min": round((execs1 - execs0) / n / elapsed * 60, 1),
        "nvidia_smi_launches_per_host_per_min": round((launches1 - launches0) / n / elapsed * 60, 1),
        "of_which_pmon_per_host_per_min": round((pmons1 - pmons0) / n / elapsed * 60, 1),
        "sshd_sessions_per_host": round(len(ours) / n, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--warmup", type=float, default=8.0)
    parser.add_argument("--modes", nargs="+", default=["stream", "tick"], choices=["stream", "tick", "tui"])
    parser.add_argument("--json", action="store_true", help="one JSON object per run instead of a table")
    args = parser.parse_args()
    if "DEVENV_SSH_CONFIG" not in os.environ:
        sys.exit("source .testhost/env first (testhost/setup writes it)")
    log = Path(os.environ["DEVENV_SSH_CONFIG"]).parent / "sshd.log"
    replay_root = private_replay()
    results = []
    try:
        for n in args.hosts:
            for mode in args.modes:
                result = run_mode(mode, n, args.seconds, args.warmup, replay_root, log)
                results.append(result)
                print(json.dumps(result), file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(replay_root, ignore_errors=True)
    if args.json:
        print(json.dumps(results, indent=1))
        return 0
    cpu = platform.processor() or platform.machine()
    print(f"machine: {platform.node()} ({os.cpu_count()} CPUs, {cpu}), python {platform.python_version()}, "
          f"{time.strftime('%Y-%m-%d %H:%M')}; window {args.seconds:g} s after {args.warmup:g} s warm-up")
    print()
    print("| hosts | mode | GPU samples/s per host | laptop CPU % per host | laptop ms/sample | remote ms/sample | "
          "remote CPU % per host | long-lived remote procs/host | SSH execs/host/min | nvidia-smi starts/host/min "
          "(of which pmon) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['hosts']} | {r['mode']} | {r['samples_per_host_per_s']} | {r['laptop_cpu_pct_per_host']} | "
              f"{r['laptop_cpu_ms_per_sample']} | {r['remote_cpu_ms_per_sample']} | {r['remote_cpu_pct_per_host']} | "
              f"{r['remote_long_lived_procs_per_host']} | {r['ssh_execs_per_host_per_min']} | "
              f"{r['nvidia_smi_launches_per_host_per_min']} ({r['of_which_pmon_per_host_per_min']}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
