"""The monitor's sampler over real SSH (a throwaway OpenSSH server on loopback) against the nvidia-smi REPLAY
(tests/replay/nvidia-smi, a real H200 recording played back in real time), including dropped connections,
a restarted sshd, a stalled stream, a host without nvidia-smi and an older driver's field names."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
from monitor_helpers import REPLAY_DIR, replay_sshd, ssh_connection, trust, wait_until
from sshd_fixture import find_processes, make_key

from devenv.gpu.sample import Gap, GpuSample
from devenv.services.monitor import (
    ERROR,
    NO_GPU,
    OK,
    RECONNECTING,
    HostSampler,
    sample_once,
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def key(tmp_path):
    return make_key(tmp_path / "keys" / "id_ed25519")


def sampler_for(conn, interval=0.2, **kw) -> HostSampler:
    kw = {"process_interval": 0.5, "backoff_initial": 0.2, "backoff_max": 1.0, **kw}
    return HostSampler(conn.name, lambda: conn, interval=interval, **kw)


def gpu_points(snap, index=0) -> list[GpuSample]:
    return [p for p in snap.history[index] if isinstance(p, GpuSample)]


def test_one_long_lived_stream_per_host_not_a_process_per_sample(tmp_path, key):
    with replay_sshd(tmp_path / "sshd", key, env={"REPLAY_GPUS": "8"}) as server:
        trust(server)
        conn = ssh_connection("box", server.port, key)
        sampler = sampler_for(conn, interval=0.23).start()
        try:
            wait_until(lambda: sampler.snapshot().samples >= 8 * 8, 30, what="8 ticks of 8 GPUs")
            snap = sampler.snapshot()
            assert snap.state == OK and [g.index for g in snap.gpus] == list(range(8))
            assert {g.name for g in snap.gpus} == {"NVIDIA H200"} and snap.driver_version == "580.159.04"
            # every sample is stamped on arrival; the rate is nvidia-smi's own (-lms 230 below), not a timer here
            stamps = [p.t for p in gpu_points(snap)]
            assert stamps == sorted(stamps)
            # on the host: exactly one streaming nvidia-smi for this sampler, at the requested rate ...
            streams = [pid for pid in find_processes("-lms 230") if pid in server.session_pids()]
            assert len(streams) == 1
            # ... and no new SSH command per sample: the sshd starts no session while samples keep coming
            sessions = server.log_text().count("Starting session: command")
            before = sampler.snapshot().samples
            wait_until(lambda: sampler.snapshot().samples >= before + 8 * 4, 30, what="4 more ticks of 8 GPUs")
            assert server.log_text().count("Starting session: command") == sessions
            assert sessions <= 4, "probe + GPU stream + process stream (+ at most one docker ps)"
            # the slower process stream names a real process of this host with its user
            wait_until(lambda: sampler.snapshot().processes, 15, what="a GPU process")
            proc = sampler.snapshot().processes[0]
            assert proc.user == "root" and proc.name == "/opt/torch/.venv/bin/python3"
            assert proc.gpu_uuid in {g.uuid for g in sampler.snapshot().gpus}
        finally:
            sampler.stop()
            conn.close()
        wait_until(lambda: not set(streams) & set(find_processes("-lms 230")), 10, what="the remote stream to end")


def test_processes_with_users_from_the_host(tmp_path, key):
    """compute-apps lists real pids of this host (REPLAY_APPS): users come from one `ps` on the host."""
    mine = subprocess.Popen(["sleep", "120"])
    theirs = subprocess.Popen(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "sleep", "120"])
    apps = tmp_path / "apps.csv"
    uuid = "GPU-35c64b04-2d7b-9f48-2883-3f9d4b9d7f59"
    apps.write_text(f"{mine.pid}, python3, 2048, {uuid}\n{theirs.pid}, train.py, 4096, {uuid}\n"
                    f"999999999, [No data], 1, {uuid}\n")
    try:
        with replay_sshd(tmp_path / "sshd", key, env={"REPLAY_APPS": str(apps)}) as server:
            trust(server)
            with ssh_connection("box", server.port, key) as conn:
                snap = sample_once(conn)
        users = {p.pid: p.user for p in snap.processes}
        assert users[mine.pid] == "root" and users[theirs.pid] == "nobody"
        assert users[999999999] is None, "a pid that is gone has no user: NA"
        assert [p.used_mib for p in snap.processes] == [2048, 4096, 1]
        assert all(p.container is None for p in snap.processes), "plain host processes"
    finally:
        for proc in (mine, theirs):
            proc.kill()
            proc.wait()


def test_dropped_connection_is_a_visible_gap_then_reconnects(tmp_path, key):
    with replay_sshd(tmp_path / "sshd", key, env={"REPLAY_GPUS": "2"}) as server:
        trust(server)
        conn = ssh_connection("box", server.port, key)
        sampler = sampler_for(conn).start()
        try:
            wait_until(lambda: sampler.snapshot().samples >= 10, 20, what="samples")
            assert server.kill_sessions() > 0  # the host drops us: sshd's session processes die
            dropped = wait_until(lambda: (s := sampler.snapshot()).state == RECONNECTING and s, 10,
                                 what="the drop to be noticed")
            assert dropped.open_gap is not None and "lost" in dropped.message
            assert dropped.next_retry_t is not None
            back = wait_until(lambda: (s := sampler.snapshot()).state == OK and s.reconnects == 1 and s, 20,
                              what="the reconnect")
            [gap] = back.gaps
            assert gap.start < gap.end and "connection to box" in gap.reason
            # the gap sits in each GPU's history between the samples before and after it
            for index in (0, 1):
                points = back.history[index]
                at = next(i for i, p in enumerate(points) if isinstance(p, Gap))
                before = [p for p in points[:at] if isinstance(p, GpuSample)]
                after = [p for p in points[at + 1:] if isinstance(p, GpuSample)]
                assert before and before[-1].t <= gap.start
                seen = len(before)
                wait_until(lambda i=index, n=seen: len(gpu_points(sampler.snapshot(), i)) > n + 3, 10)
                assert after == [] or after[0].t >= gap.end
        finally:
            sampler.stop()
            conn.close()


def test_sshd_restart_backs_off_then_recovers(tmp_path, key):
    server = replay_sshd(tmp_path / "sshd", key).start()
    port = server.port
    trust(server)
    conn = ssh_connection("box", port, key)
    sampler = sampler_for(conn).start()
    try:
        wait_until(lambda: sampler.snapshot().samples >= 5, 20, what="samples")
        server.stop()  # the host goes away: listener and sessions
        down_at = time.time()
        snap = wait_until(lambda: (s := sampler.snapshot()).state == RECONNECTING and s, 10)
        time.sleep(2.0)
        snap = sampler.snapshot()
        assert snap.state == RECONNECTING and snap.open_gap is not None, "no sample while the host is down"
        assert "retrying in" in (snap.hint or "")
        server = replay_sshd(tmp_path / "sshd", key, port=port).start()  # same host key, same port
        back = wait_until(lambda: (s := sampler.snapshot()).state == OK and s.reconnects == 1 and s, 20,
                          what="recovery after sshd restart")
        [gap] = back.gaps
        assert gap.end - gap.start >= time.time() - down_at - (time.time() - gap.end) - 0.5
        assert gap.end - gap.start >= 2.0
    finally:
        sampler.stop()
        conn.close()
        server.stop()


def test_stalled_stream_is_dropped_and_replaced(tmp_path, key):
    """A link that goes silent without closing (a suspended peer): the watchdog drops it and reconnects."""
    with replay_sshd(tmp_path / "sshd", key) as server:
        trust(server)
        conn = ssh_connection("box", server.port, key)
        sampler = sampler_for(conn, stall_after=1.5).start()
        stopped: list[int] = []
        try:
            wait_until(lambda: sampler.snapshot().samples >= 5, 20, what="samples")
            stopped = server.signal_sessions(signal.SIGSTOP)  # a short command may end before its stop
            assert stopped, "no session process to stop"
            back = wait_until(lambda: (s := sampler.snapshot()).state == OK and s.reconnects == 1 and s, 30,
                              what="a new connection after the stall")
            assert "stalled" in back.gaps[0].reason
            assert back.gaps[0].end - back.gaps[0].start >= 1.5
        finally:
            sampler.stop()
            conn.close()
            for pid in stopped:
                for sig in (signal.SIGKILL, signal.SIGCONT):
                    try:
                        os.kill(pid, sig)
                    except ProcessLookupError:
                        pass


def test_host_without_nvidia_smi_says_no_gpu(tmp_path, key):
    with replay_sshd(tmp_path / "sshd", key, replay=False) as server:
        trust(server)
        conn = ssh_connection("cpu-box", server.port, key)
        sampler = sampler_for(conn).start()
        try:
            snap = wait_until(lambda: (s := sampler.snapshot()).state != "connecting" and s, 20)
            assert snap.state == NO_GPU and "nvidia-smi is not installed" in snap.message
            assert snap.hint and snap.gpus == () and snap.gaps == ()
            # no GPU, but the host line (this machine's /proc, through the sshd): CPU % after two frames
            meminfo = {k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in open("/proc/meminfo"))}
            lined = wait_until(lambda: (h := sampler.snapshot().host_stats) and h.cpu_pct is not None and h, 20,
                               what="the host line of a host without a GPU")
            assert lined.mem_total_kib == meminfo["MemTotal"] and lined.swap_total_kib == meminfo["SwapTotal"]
            assert lined.ncpu == os.cpu_count() and lined.load1 is not None
            once = sample_once(conn)
            assert once.state == NO_GPU and once.gpus == ()
            assert once.host_stats and once.host_stats.mem_total_kib == meminfo["MemTotal"]
            assert once.host_stats.cpu_pct is not None  # one look reads /proc/stat twice
        finally:
            sampler.stop()
            conn.close()


def test_older_driver_field_names(tmp_path, key):
    """A driver that only knows clocks_throttle_reasons.active: renamed, still decoded. One that knows
    neither: the column is NA and the snapshot says which field is missing."""
    with replay_sshd(tmp_path / "a", key, env={"REPLAY_REJECT": "clocks_event_reasons.active"}) as old:
        trust(old)
        with ssh_connection("old", old.port, key) as conn:
            snap = sample_once(conn)
    assert snap.state == OK and snap.fields_missing == ()
    assert snap.gpus[0].throttle_reasons is not None
    reject_both = "clocks_event_reasons.active,clocks_throttle_reasons.active"
    with replay_sshd(tmp_path / "b", key, env={"REPLAY_REJECT": reject_both}) as older:
        trust(older)
        with ssh_connection("older", older.port, key) as conn:
            snap = sample_once(conn)
    assert snap.state == OK and snap.fields_missing == ("clocks_event_reasons.active",)
    gpu = snap.gpus[0]
    assert gpu.throttle_reasons is None and gpu.util_pct is not None and gpu.power_w is not None


def test_unreachable_host_is_an_error_state(tmp_path, key):
    from sshd_fixture import free_port

    conn = ssh_connection("nowhere", free_port(), key)
    sampler = sampler_for(conn).start()
    try:
        snap = wait_until(lambda: (s := sampler.snapshot()).state == ERROR and s, 20)
        assert snap.message and snap.hint and snap.gaps == (), "no gap before the first sample"
    finally:
        sampler.stop()
    once = sample_once(conn)
    assert once.state == ERROR and once.message


def test_sm_per_process_comes_in_the_process_stream(tmp_path, key):
    """The long-lived sampler over real SSH: each process gets its GPU's SM % from the `pmon -c 1` that the
    process loop runs in its own frame; no SSH session is opened for it (the sessions stay probe + 2 streams)."""
    procs = [subprocess.Popen(["sleep", "120"]) for _ in range(5)]
    listed = subprocess.run([str(REPLAY_DIR / "nvidia-smi"), "-L"], env={"REPLAY_GPUS": "5"}, capture_output=True,
                            text=True, check=True).stdout
    uuids = [line.split("UUID: ")[1].rstrip(")") for line in listed.splitlines()]
    apps = tmp_path / "apps.csv"
    apps.write_text("".join(f"{p.pid}, python3, 1002, {u}\n" for p, u in zip(procs, uuids)))
    try:
        env = {"REPLAY_GPUS": "5", "REPLAY_APPS": str(apps), "REPLAY_TICK": "20"}
        with replay_sshd(tmp_path / "sshd", key, env=env) as server:
            trust(server)
            conn = ssh_connection("box", server.port, key)
            sampler = sampler_for(conn).start()
            try:
                wait_until(lambda: len(sampler.snapshot().processes) == 5, 30, what="the 5 processes")
                snap = sampler.snapshot()
                util = {g.uuid: g.util_pct for g in snap.gpus}
                assert {p.pid: p.sm_pct for p in snap.processes} == {
                    p.pid: util[p.gpu_uuid] or None for p in snap.processes}
                assert any(p.sm_pct for p in snap.processes) and snap.sm_error is None
                assert server.log_text().count("Starting session: command") <= 4
            finally:
                sampler.stop()
                conn.close()
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
