"""Shared pieces of the monitor tests (a helper module to import; tests/ is on sys.path under pytest).

- recorded_snapshot(): a HostSnapshot built from the real H200 recording (tests/fixtures/monitor), for the
  screens' snapshot tests: the same bytes the replay plays, stamped at fixed times so pictures are stable.
- FixedSampler: serves one snapshot, as a sampler would (the app's sampler_factory hook).
- replay_sshd(): a throwaway real sshd whose sessions find tests/replay/nvidia-smi as `nvidia-smi`
  (sshd_config SetEnv PATH=...), with REPLAY_* knobs passed the same way.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path

from sshd_fixture import SSHD

from devenv.config import paths
from devenv.config.profiles import SSHTarget
from devenv.gpu.sample import Gap, GpuSample, HostStats, ProcessSample, cpu_busy_pct, parse_gpu_line, parse_pmon
from devenv.remote.ssh import SSHConnection
from devenv.services.monitor import HostSnapshot, read_apps_frames

TESTS = Path(__file__).resolve().parent
REPLAY_DIR = TESTS / "replay"
RECORDING = TESTS / "fixtures" / "monitor" / "stream_full_lms500.csv"
PMON_RECORDING = TESTS / "fixtures" / "pmon" / "load_pmon_u_d1.txt"
T0 = 1_796_000_000.0  # a fixed "now" for pictures: 2026-11-29


def recorded_rows() -> list[str]:
    return [line for line in RECORDING.read_text().splitlines() if line.strip()]


def recorded_gpu(k: int, row: str, t: float) -> GpuSample:
    """GPU k as the replay shows it: the recorded line, with a synthesised index/UUID/PCI id for k > 0."""
    sample = parse_gpu_line(row, t)
    assert sample is not None, row
    if k:
        sample = replace(sample, index=k, uuid=sample.uuid[:-2] + f"{k:02x}", pci_bus_id=f"00000000:00:{6 + k:02X}.0")
    return sample


def recorded_membw() -> list[int]:
    """Memory bandwidth % (pmon's `mem`) of the same heavy load in the same recording, 3 samples."""
    rows = [line.split() for line in PMON_RECORDING.read_text().splitlines()]
    return [int(r[4]) for r in rows if len(r) > 4 and r[1] == "480"]


def recorded_host_stats() -> HostStats:
    """The H200's host line: the process loop's first two frames as run there (tests/fixtures/pmon/loop_frames.txt),
    CPU % from their /proc/stat readings. That loop did not read swap yet: swap stays NA."""
    frames = list(read_apps_frames(iter((TESTS / "fixtures" / "pmon" / "loop_frames.txt").read_text().splitlines())))
    first, second = frames[0].host, frames[1].host
    assert first is not None and second is not None
    return replace(second, cpu_pct=cpu_busy_pct(first.cpu_jiffies, second.cpu_jiffies))


def host_stats_of_testbox() -> HostStats:
    """The test host's (no GPU) host line, one look recorded over ssh
    (tests/fixtures/monitor/testbox_nogpu_frame.txt)."""
    lines = (TESTS / "fixtures" / "monitor" / "testbox_nogpu_frame.txt").read_text().splitlines()
    [frame] = read_apps_frames(iter(lines))
    assert frame.host is not None
    return frame.host


def recorded_sm() -> list[int]:
    """SM % of the heavy load (pid 480: a matmul loop alone on its GPU) in a real pmon of an H200, 3 samples."""
    rows = [line.split() for line in PMON_RECORDING.read_text().splitlines()]
    heavy = [int(r[3]) for r in rows if len(r) > 3 and r[1] == "480"]
    assert heavy and parse_pmon(" ".join(r) for r in rows), PMON_RECORDING
    return heavy


def recorded_snapshot(host: str = "h200-box", n_gpus: int = 8, *, gap: bool = True, now: float = T0,
                      state: str = "ok") -> HostSnapshot:
    """40 recorded ticks (1 s apart) per GPU, GPU k shifted by 7 ticks; ticks 28-33 missing (a gap)."""
    rows = recorded_rows()
    ticks = range(len(rows))
    missing = set(range(28, 34)) if gap else set()
    start = now - len(rows)
    history, latest = {}, {}
    the_gap = Gap(start + 27, start + 34, "connection to h200-box (10.0.0.5:22) lost")
    for k in range(n_gpus):
        points = []
        for i in ticks:
            if i in missing:
                if i == min(missing):
                    points.append(the_gap)
                continue
            points.append(recorded_gpu(k, rows[(i + 7 * k) % len(rows)], start + i))
        history[k] = tuple(points)
        latest[k] = points[-1]
    gpus = tuple(latest[k] for k in range(n_gpus))
    busy = [g for g in gpus if g.mem_used_mib]
    sm = recorded_sm()  # each busy GPU's one process gets the recorded heavy load's SM % in turn (99, 77, 88)
    membw = recorded_membw()  # and the memory bandwidth % of the same pmon row (22, 17, 19)
    processes = tuple(
        ProcessSample(4242 + (g.index % 2), "/opt/torch/.venv/bin/python3", g.mem_used_mib, g.uuid,
                      "alice" if g.index % 2 else "root", "devenv-cuda" if g.index % 2 else None,
                      sm_pct=sm[i % len(sm)], membw_pct=membw[i % len(membw)])
        for i, g in enumerate(busy))
    return HostSnapshot(host, state, now, gpus=gpus, history=history, processes=processes,
                        processes_t=now - 2, gaps=(the_gap,) if gap else (), last_sample_t=now - 0.4,
                        samples=len(rows) * n_gpus, reconnects=1 if gap else 0, host_stats=recorded_host_stats())


class FixedSampler:
    """A sampler that always shows one snapshot (for screens fed by recorded samples)."""

    def __init__(self, snapshot: HostSnapshot):
        self.host = snapshot.host
        self._snapshot = snapshot
        self.started = self.stopped = False
        self._served = threading.Event()

    def start(self):
        self.started = True
        return self

    def stop(self, timeout: float = 3.0) -> None:
        self.stopped = True
        self._served.set()

    def snapshot(self) -> HostSnapshot:
        return self._snapshot

    def wait_for_update(self, version: int, timeout: float):
        if version == 1:
            self._served.wait(timeout)  # nothing new: a real sampler blocks here too (until stopped)
        return 1, self._snapshot


def replay_sshd(workdir: Path, key, *, env: dict[str, str] | None = None, replay: bool = True,
                port: int | None = None, path: str | None = None, namespace_setup: str = "") -> SSHD:
    """An sshd whose sessions get PATH=<tests/replay>:/usr/bin:/bin (so `nvidia-smi` is the replay) and env.

    HOME is an empty folder too: bash run by sshd sources ~/.bashrc, and this machine's root .bashrc runs
    `pyenv rehash`, whose lock file stays behind (hanging every later session) when a test kills a session."""
    path = path or (f"{REPLAY_DIR}:/usr/bin:/bin" if replay else "/usr/bin:/bin")
    home = Path(workdir) / "home"
    home.mkdir(parents=True, exist_ok=True)
    pairs = " ".join(f"{k}={v}" for k, v in {"PATH": path, "HOME": home, **(env or {})}.items())
    return SSHD(workdir, authorized_keys=[key.public], extra_config=f"SetEnv {pairs}\nMaxSessions 32\n", port=port,
                namespace_setup=namespace_setup)


def trust(server: SSHD) -> None:
    with paths.known_hosts_path().open("a") as f:
        f.write(server.known_hosts_line())


def ssh_target(port: int, key, **kw) -> SSHTarget:
    return SSHTarget(**{"hostname": "127.0.0.1", "port": port, "user": "root", "identity_file": str(key.path),
                        "connect_timeout": 5, **kw})


def ssh_connection(name: str, port: int, key) -> SSHConnection:
    return SSHConnection(ssh_target(port, key), name=name)


def wait_until(predicate, timeout: float, step: float = 0.05, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")
