"""Autostop's pure parts: the watcher's judging (imported from the very file shipped to hosts), its signal
readers over /proc snapshots and recorded nvidia-smi outputs, the settings' validation, status's summary."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from devenv.cli import main
from devenv.config import autostop as cfg
from devenv.config.profiles import parse_env, parse_host
from devenv.errors import ProfileError
from devenv.services.environments import autostop
from devenv.services.environments import autostop_watcher as w

IDLE = {"sessions": w.Signal(w.IDLE), "gpu": w.Signal(w.IDLE, "GPU 0 1%"), "jupyter": w.Signal(w.IDLE)}
FIXTURES = Path(__file__).parent / "fixtures"


def test_idle_for_the_whole_window_stops_and_any_activity_resets_the_clock():
    judge = w.Judge(idle_s=60, interval_s=10)
    assert not judge.observe(0, IDLE)
    for t in (10, 20, 30, 40, 50):
        assert not judge.observe(t, IDLE)
    assert judge.stops_in == 10
    assert not judge.observe(55, {**IDLE, "sessions": w.Signal(w.ACTIVE, "1 open")})   # a session: back to 0
    assert judge.idle_for == 0 and judge.held_by == ["sessions"]
    for t in (65, 75, 85, 95, 105):
        assert not judge.observe(t, IDLE)
    assert judge.observe(115, IDLE)


def test_an_unknown_signal_holds_the_clock_like_activity():
    judge = w.Judge(idle_s=20, interval_s=10)
    gpu_unknown = {**IDLE, "gpu": w.Signal(w.UNKNOWN, "nvidia-smi not found")}
    for t in range(0, 200, 10):
        assert not judge.observe(t, gpu_unknown)
    assert judge.held_by == ["gpu"]


def test_absent_and_skipped_signals_do_not_hold():
    judge = w.Judge(idle_s=10, interval_s=5)
    quiet = {**IDLE, "gpu": w.Signal(w.ABSENT, "no GPUs"), "runs": w.Signal(w.SKIPPED)}
    judge.observe(0, quiet)
    judge.observe(5, quiet)
    assert judge.observe(10, quiet)


def test_a_jump_between_samples_counts_two_intervals_at_most():
    """The host slept, the watcher was starved, or a clock jumped: time nobody looked at is not idle time."""
    judge = w.Judge(idle_s=3600, interval_s=30)
    judge.observe(1000, IDLE)
    assert not judge.observe(1000 + 86400, IDLE)
    assert judge.idle_for == 60
    assert not judge.observe(1000 + 86400 - 500, IDLE)     # backwards: no negative time, no stop
    assert judge.idle_for == 60


def test_gpu_seconds_split_by_threshold():
    seconds = w.GpuSeconds()
    seconds.add(10, [80.0, 1.0], threshold=5)
    seconds.add(10, None, threshold=5)          # unknown: counted nowhere
    assert (seconds.active, seconds.idle) == (10, 10)


def test_nvidia_smi_parsing_takes_only_the_environments_gpus():
    text = "0, 97\n1, 0\n2, 3\n"
    assert w.parse_gpu_utilization(text, "all") == {0: 97.0, 1: 0.0, 2: 3.0}
    assert w.parse_gpu_utilization(text, "1,2") == {1: 0.0, 2: 3.0}
    assert w.gpu_signal(w.parse_gpu_utilization(text, "1,2"), "", 5).state == w.IDLE
    assert w.gpu_signal(w.parse_gpu_utilization(text, "0"), "", 5).state == w.ACTIVE
    for bad in ("0, [N/A]\n", "", "3, 10\n"):
        with pytest.raises(ValueError):
            w.parse_gpu_utilization(bad, "0")
    assert w.gpu_signal(None, "nvidia-smi not found", 5) == w.Signal(w.UNKNOWN, "nvidia-smi not found")


def recorded_utilization(name: str) -> str:
    """The watcher's query (index, utilization.gpu; noheader, nounits) cut from a full --query-gpu line recorded
    on the H200 (fields 0 and 8, as query-gpu_idle_header.csv names them)."""
    lines = (FIXTURES / "nvidia-smi" / name).read_text().splitlines()
    return "".join(f"{f[0]}, {f[8]}\n" for f in (line.split(", ") for line in lines if line.strip()))


def test_recorded_h200_outputs_busy_and_idle():
    busy = w.parse_gpu_utilization(recorded_utilization("query-gpu_busy.csv"), "all")
    idle = w.parse_gpu_utilization(recorded_utilization("query-gpu_idle.csv"), "all")
    assert busy == {0: 100.0} and idle == {0: 0.0}
    assert w.gpu_signal(busy, "", 5).state == w.ACTIVE and w.gpu_signal(idle, "", 5).state == w.IDLE


CID = "c" * 64


def proc(pid, ppid, cmd, cgroup="", ns_pid=0, uid=0):
    return w.Proc(pid, ppid, uid, cmd, cgroup, ns_pid)


def test_sessions_in_a_container_are_sshd_sessions_running_something_and_docker_execs():
    inside = f"0::/system.slice/docker-{CID}.scope\n"
    procs = [proc(100, 90, "/sbin/docker-init -- entrypoint", inside, 1),   # init: parent is the shim
             proc(101, 100, "/usr/sbin/sshd -D -e", inside, 7),
             proc(102, 100, "python -m jupyterlab", inside, 8),
             proc(103, 101, "sshd: root@notty", inside, 9)]                     # a tunnel: runs nothing
    assert w.sessions_in_container(procs, CID) == []
    shell = procs + [proc(104, 103, "bash", inside, 10)]
    assert [p.pid for p in w.sessions_in_container(shell, CID)] == [103]
    execd = procs + [proc(200, 90, "sleep 1000", inside, 30)]                   # docker exec: parent outside
    assert [p.pid for p in w.sessions_in_container(execd, CID)] == [200]
    other = procs + [proc(300, 90, "sleep 1000", "0::/docker-other.scope\n", 30)]
    assert w.sessions_in_container(other, CID) == []
    assert w.container_init(procs, CID) == 100


def test_sessions_on_a_bare_host_are_the_users_sshd_sessions_that_run_something():
    procs = [proc(1, 0, "/sbin/init"), proc(50, 1, "sshd: /usr/sbin/sshd -D"),
             proc(60, 50, "sshd: alice@notty", uid=1000),                     # a Jupyter tunnel only
             proc(70, 50, "sshd: bob@pts/0", uid=1001), proc(71, 70, "-bash", uid=1001)]
    assert w.sessions_on_host(procs, 1000, set()) == []
    shell = procs + [proc(61, 60, "python train.py", uid=1000)]
    assert [p.pid for p in w.sessions_on_host(shell, 1000, set())] == [60]
    assert w.sessions_on_host(shell, 1000, exclude={61}) == []                # the watcher's own ancestry


def test_run_phase_reads_issue_23s_layout():
    stat = "4242 (sh) S 1 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 987654 1 2 3"
    assert w.run_phase(False, "4242 987654 4243 1700000000", stat) == "running"
    assert w.run_phase(False, "4242 111 4243 1700000000", stat) == "lost"          # the pid was reused
    assert w.run_phase(False, "4242 987654 4243 1", stat.replace(") S", ") Z")) == "lost"
    assert w.run_phase(False, "4242 987654 4243 1", None) == "lost"
    assert w.run_phase(False, None, None) == "starting"
    assert w.run_phase(True, "4242 987654 4243 1", stat) == "exited"
    assert w.runs_signal({"a1": "exited", "b2": "running"}).state == w.ACTIVE
    assert w.runs_signal({"a1": "exited", "b2": "lost"}).state == w.IDLE


def test_read_runs_on_a_real_folder(tmp_path):
    import os

    runs = tmp_path / "ws" / ".devenv" / "runs"
    (runs / "aaaa").mkdir(parents=True)
    (runs / "aaaa" / "meta.json").write_text("{}")
    (runs / "aaaa" / "exit").write_text("0 1")
    config = {"runs_dir": str(tmp_path / "ws" / ".devenv" / "runs")}
    assert w.read_runs(config, "/").state == w.IDLE
    (runs / "bbbb").mkdir()
    (runs / "bbbb" / "meta.json").write_text("{}")
    start = Path(f"/proc/{os.getpid()}/stat").read_text().rsplit(") ", 1)[1].split()[19]
    (runs / "bbbb" / "pid").write_text(f"{os.getpid()} {start} {os.getpid()} 1\n")
    assert w.read_runs(config, "/") == w.Signal(w.ACTIVE, "1 running (bbbb)")
    assert w.read_runs({"runs_dir": str(tmp_path / "none")}, "/").state == w.IDLE


def test_jupyter_activity_is_a_busy_kernel_or_a_change_between_samples():
    seen = w.JupyterSeen()
    kernels = [{"id": "k1", "execution_state": "idle", "last_activity": "T1"}]
    assert w.jupyter_signal(kernels, [], seen).state == w.IDLE        # the first look: nothing to compare
    assert w.jupyter_signal(kernels, [], seen).state == w.IDLE
    moved = [{"id": "k1", "execution_state": "idle", "last_activity": "T2"}]
    assert w.jupyter_signal(moved, [], seen).state == w.ACTIVE
    busy = [{"id": "k1", "execution_state": "busy", "last_activity": "T2"}]
    assert w.jupyter_signal(busy, [], seen).state == w.ACTIVE
    assert w.jupyter_signal(busy[:0], [{"name": "1", "last_activity": "T3"}], seen).state == w.ACTIVE
    assert w.jupyter_signal([], [{"name": "1", "last_activity": "T3"}], seen).state == w.IDLE


@pytest.mark.parametrize("text, seconds", [("90m", 5400), ("1h30m", 5400), ("45s", 45), ("2h", 7200),
                                           ("90", 5400), ("1d", 86400), ("5s", 5)])
def test_durations(text, seconds):
    assert cfg.parse_duration(text) == seconds


@pytest.mark.parametrize("setting, says", [
    (cfg.Autostop(60, interval_s=120), "shorter than the watcher's sampling"),
    (cfg.Autostop(30 * 86400), "longer than a week"),
    (cfg.Autostop(1), "too short"),
    (cfg.Autostop(600, gpu_threshold=0), "gpu_threshold"),
    (cfg.Autostop(600, action="reboot"), "is not one of"),
])
def test_absurd_settings_are_refused(setting, says):
    with pytest.raises(cfg.AutostopError, match=says) as caught:
        cfg.validate(setting)
    assert caught.value.exit_code == 2 and caught.value.hint


def test_default_sampling_fits_the_window():
    assert cfg.Autostop(5400).sample_s == 30
    assert cfg.Autostop(5).sample_s == 1


def test_profiles_take_autostop_as_a_duration_or_a_mapping():
    env = parse_env("image: x\nautostop: 90m\n", "e", "e.yaml")
    assert env.autostop == cfg.Autostop(5400)
    env = parse_env("image: x\nautostop: {idle: 2h, action: down, hook: python save.py, gpu_threshold: 10}\n",
                    "e", "e.yaml")
    assert env.autostop == cfg.Autostop(7200, "down", "python save.py", 10)
    host = parse_host("ssh: {alias: a}\nautostop: 30m\n", "h", "h.yaml")
    assert host.autostop is not None and host.autostop.idle_s == 1800
    with pytest.raises(ProfileError, match=r"e.yaml:2: field 'autostop'.*not a duration"):
        parse_env("image: x\nautostop: soon\n", "e", "e.yaml")
    with pytest.raises(ProfileError, match="shorter than the watcher's sampling"):
        parse_env("image: x\nautostop: {idle: 10s, sample: 1m}\n", "e", "e.yaml")


def test_up_refuses_a_bad_autostop_before_connecting(tmp_path, monkeypatch):
    monkeypatch.setenv("DEVENV_HOME", str(tmp_path))
    result = CliRunner().invoke(main, ["up", "nowhere-host", "--autostop", "soon"])
    assert result.exit_code == 2 and "not a duration" in result.output and "90m" in result.output
    result = CliRunner().invoke(main, ["up", "nowhere-host", "--autostop", "1s"])
    assert result.exit_code == 2 and "too short" in result.output
    result = CliRunner().invoke(main, ["up", "nowhere-host", "--autostop", "9m", "--no-autostop"])
    assert result.exit_code == 2


def test_status_summary_warns_in_the_last_tenth_and_says_stopped():
    state = {"state": "watching", "window_s": 600, "idle_for_s": 550, "stops_in_s": 50, "watcher_alive": True,
             "signals": {"gpu": {"state": "unknown", "said": "nvidia-smi not found"}}, "active_gpu_s": 3.0}
    summary = autostop.summary(state, running=True)
    assert summary["warning"] and summary["unknown"] == {"gpu": "nvidia-smi not found"}
    assert summary["active_gpu_s"] == 3.0 and summary["idle_gpu_s"] == 0
    assert not autostop.summary({**state, "stops_in_s": 300}, running=True)["warning"]
    assert autostop.summary({**state, "watcher_alive": False}, running=True)["state"] == "not watching"
    stopped = {**state, "state": "stopped", "reason": "idle 10 m"}
    assert autostop.summary(stopped, running=False)["state"] == "stopped"
    assert autostop.summary(stopped, running=True)["state"] == "not watching"   # brought back without autostop
    lines = 'me-e1 1 {"state": "watching"}\nbroken\nme-e2 0 {not json\n'
    assert autostop.parse_states(lines) == {"me-e1": {"state": "watching", "watcher_alive": True}}


def test_the_hook_runs_first_in_the_workspace_then_the_action_even_when_the_hook_fails(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    order = tmp_path / "order"
    config = {"hook_argv": ["sh", "-c", f"pwd > {order}; exit 3"], "hook_cwd": str(workspace),
              "action_steps": [{"argv": ["sh", "-c", f"echo stopped >> {order}"]}]}
    assert w.act(config) == "hook failed (exit 3)"
    assert order.read_text().splitlines() == [str(workspace), "stopped"]
    assert w.act({"action_steps": [{"argv": ["/nonexistent/docker", "stop", "x"]}]}) == \
        "/nonexistent/docker failed (FileNotFoundError)"


def test_stop_ends_a_process_group(tmp_path):
    import subprocess

    group = subprocess.Popen(["sh", "-c", "sleep 600 & wait"], start_new_session=True)
    w.act({"action_steps": [{"killpg": group.pid}]})
    assert group.wait(30) != 0


def test_a_zombie_is_not_alive():
    """An ended process that its parent has not reaped yet runs nothing. Before, the watcher took it for alive:
    `stop` of a group whose leader had ended at the TERM waited the whole 5 s grace (this test failed)."""
    import os
    import subprocess

    child = subprocess.Popen(["true"])
    deadline = time.monotonic() + 30
    while _state_of(child.pid) != "Z" and time.monotonic() < deadline:   # it ends; this test does not reap it yet
        time.sleep(0.01)
    try:
        assert _state_of(child.pid) == "Z"
        assert not w._alive(child.pid)
    finally:
        child.wait()
    assert w._alive(os.getpid())


def _state_of(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def test_the_watcher_ends_when_its_environment_is_gone():
    assert w.environment_gone({"sessions": {"kind": "host"}, "alive_pid": 2 ** 22 + 1}, [])
    import os

    assert not w.environment_gone({"sessions": {"kind": "host"}, "alive_pid": os.getpid()}, [])
    assert w.environment_gone({"sessions": {"kind": "container", "container_id": CID}}, [])


def test_on_a_bare_host_only_sessions_into_the_environments_workspace_count():
    """The same user's other logins to the host (another project, another devenv's commands) do not hold an
    environment: only a session running something in its workspace does (devenv exec runs there). Before, any
    session of the user held it, so a shared host's other work kept an idle environment up for good."""
    ws = "/home/alice/devenv-workspaces/cuda"
    procs = [proc(50, 1, "sshd: /usr/sbin/sshd -D"),
             proc(60, 50, "sshd: alice@notty", uid=1000), proc(61, 60, "bash -c cd x", uid=1000),
             proc(62, 61, "python other.py", uid=1000)]
    procs = [p if p.pid not in (61, 62) else replace(p, cwd="/home/alice/elsewhere") for p in procs]
    assert w.sessions_on_host(procs, 1000, set(), ws) == []
    assert [p.pid for p in w.sessions_on_host(procs, 1000, set())] == [60]      # without a workspace: any
    deep = procs + [replace(proc(63, 62, "python train.py", uid=1000), cwd=ws + "/myproj")]
    assert [p.pid for p in w.sessions_on_host(deep, 1000, set(), ws)] == [60]
    assert w.sessions_on_host(deep, 1000, {63}, ws) == []
    assert w.sessions_on_host([*procs[:1], replace(procs[1]), replace(procs[2], cwd=ws + "-other")], 1000, set(),
                              ws) == []                                         # a sibling folder is not it


def test_sessions_in_a_slurm_job_are_its_numbered_steps_but_not_relays_runs_or_the_watcher():
    """devenv exec into a Slurm job is an `srun --overlap` step: its task (slurmstepd's child) is a session;
    the batch and extern steps are the job itself, a relay to Jupyter is a browser tab, a run is the runs signal's
    and another job's steps are not this one's."""
    procs = [proc(10, 1, "slurmstepd: [77.batch]"), proc(11, 10, "python -m jupyterlab"),
             proc(12, 11, "python autostop_watcher.py --in-job /h/.devenv/autostop/t-e 11"),
             proc(20, 1, "slurmstepd: [77.extern]"), proc(21, 20, "sleep 100000000"),
             proc(30, 1, "slurmstepd: [77.0]"),
             proc(31, 30, "python -u -c import json,os,socket,sys,select,time\na=sys.argv[1:] 8888"),
             proc(40, 1, "slurmstepd: [77.1]"), proc(41, 40, "sh /w/.devenv/runs/r1/supervise.sh /w/r1 0 --"),
             proc(50, 1, "slurmstepd: [770.2]"), proc(51, 50, "bash"),
             proc(60, 1, "slurmstepd: [77.3]"), proc(61, 60, "python train.py"), proc(62, 61, "python worker")]
    assert [p.pid for p in w.sessions_in_job(procs, "77")] == [61]
    assert [p.pid for p in w.sessions_in_job(procs, "770")] == [51]
    assert w.sessions_in_job(procs, "") == []


def test_in_a_slurm_job_the_watcher_waits_to_be_armed_for_its_job_then_ends_the_job(tmp_path):
    """The watcher the job's launcher starts beside Jupyter adopts only a config naming its own job, and when
    idle ends the job itself: its state says stopped first (the job's end ends the watcher too), then Jupyter
    (the batch step) gets TERM."""
    import json
    import os
    import subprocess
    import sys

    folder = tmp_path / "t-e"
    folder.mkdir()
    jupyter = subprocess.Popen(["sleep", "600"])
    base = {"env": "e", "idle_s": 0.3, "interval_s": 0.1, "gpus": "none", "sessions": {"kind": "job"},
            "runs_dir": None, "jupyter": None, "action": "stop", "action_steps": [{"end_job": 30}],
            "ends_itself": True}
    (folder / "config.json").write_text(json.dumps({**base, "job_id": "9999",
                                                    "state_file": str(folder / "other.json")}))
    watcher = subprocess.Popen([sys.executable, w.__file__, "--in-job", str(folder), str(jupyter.pid)],
                               env={**os.environ, "SLURM_JOB_ID": "4242"})
    try:
        tmp = folder / "config.json.tmp"
        tmp.write_text(json.dumps({**base, "job_id": "4242", "state_file": str(folder / "state.json")}))
        tmp.replace(folder / "config.json")       # as `up --autostop` writes it: a new file in its place
        assert jupyter.wait(60) == -15            # TERM: the batch step ends, so does the job
        assert watcher.wait(60) == 0
        state = json.loads((folder / "state.json").read_text())
        assert (state["state"], state["reason"], state["job_id"]) == ("stopped", "idle 0 s", "4242")
        assert not (folder / "other.json").exists()
    finally:
        for p in (jupyter, watcher):
            if p.poll() is None:
                p.kill()
                p.wait()


def test_in_a_slurm_job_the_watcher_logs_what_holds_the_job_each_time_that_changes(tmp_path, capsys):
    """The job's autostop log (the watcher's stdout in a job) gets one line when what holds the clock changes,
    not one per sample: held by the GPU for three samples, then idle until it acts."""
    import os

    smi = tmp_path / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\nn=$(cat {tmp_path}/n 2>/dev/null || echo 0); echo $((n + 1)) > {tmp_path}/n\n'
                   'if [ "$n" -lt 3 ]; then echo "0, 90"; else echo "0, 1"; fi\n')
    smi.chmod(0o755)
    config = {"env": "e", "idle_s": 30, "interval_s": 10, "gpus": "0", "gpu_threshold": 5, "job_id": "4242",
              "sessions": {"kind": "job"}, "runs_dir": None, "jupyter": None, "alive_pid": os.getpid(),
              "state_file": str(tmp_path / "state.json"), "nvidia_smi": str(smi), "action": "stop",
              "action_steps": [{"argv": ["touch", str(tmp_path / "stopped")]}]}
    clock, sleep, armed = _clock_and_sleep([float(t) for t in range(0, 200, 10)])
    assert w.watch(config, armed, clock, sleep) == "acted"
    lines = [line.split(" ", 1)[1] for line in capsys.readouterr().out.splitlines()]
    assert lines == ["autostop: held by gpu (GPU 0 90%)", "autostop: idle, stops after 30 s idle"]
    assert (tmp_path / "stopped").exists()


def _busy_gpu_config(tmp_path, smi_script: str) -> dict:
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\n" + smi_script)
    smi.chmod(0o755)
    import os

    return {"env": "e", "idle_s": 30, "interval_s": 10, "gpus": "0", "gpu_threshold": 5,
            "sessions": {"kind": "host", "uid": "self", "workspace": str(tmp_path / "ws")}, "runs_dir": None,
            "jupyter": None, "state_file": str(tmp_path / "state.json"), "action": "stop",
            "action_steps": [{"argv": ["touch", str(tmp_path / "stopped")]}], "alive_pid": os.getpid(),
            "nvidia_smi": str(smi)}


def _clock_and_sleep(times: list[float]):
    """A clock giving `times` in order, and a sleep that ends the watch (disarmed) once they are spent."""
    left = list(times)
    taken: list[float] = []

    def clock() -> float:
        taken.append(left.pop(0))
        return taken[-1]

    return clock, (lambda _s: None), (lambda: bool(left))


@pytest.mark.parametrize("jumps", [[0, 10, 86400 + 20, 86400 + 30, 40, 50, 60, 1e9, 1e9 + 10, 70],
                                   [0, -1e6, 1e6, 0, 1e12, 5, 10, 15, 20, 25, 30, 35, 40]])
def test_a_clock_jump_never_stops_a_busy_environment(tmp_path, jumps):
    """The clock jumps forwards by a day and back (a host's NTP step, a VM resumed): with the GPU busy the
    environment is never stopped, however far the clock went, and the state says who holds it."""
    import json

    config = _busy_gpu_config(tmp_path, 'echo "0, 97"\n')
    clock, sleep, armed = _clock_and_sleep(jumps)
    assert w.watch(config, armed, clock, sleep) == "disarmed"
    assert not (tmp_path / "stopped").exists()
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["state"] == "watching" and state["held_by"] == ["gpu"] and state["samples"] == len(jumps)


def test_the_same_clock_jumps_with_an_idle_gpu_count_two_intervals_at_most(tmp_path):
    """The counterpart: idle, a jump of a day counts 20 s (two intervals), not the 30 s window; a second one
    ends it."""
    config = _busy_gpu_config(tmp_path, 'echo "0, 0"\n')
    clock, sleep, armed = _clock_and_sleep([0, 86400])
    assert w.watch(config, armed, clock, sleep) == "disarmed"
    assert not (tmp_path / "stopped").exists()
    clock, sleep, armed = _clock_and_sleep([0, 86400, 86400 * 2])
    assert w.watch(config, armed, clock, sleep) == "acted"
    assert (tmp_path / "stopped").exists()


@pytest.mark.parametrize(("smi_script", "said"), [
    (None, "nvidia-smi not found"),
    ('echo "NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver" >&2; exit 9\n',
     "nvidia-smi exit 9: NVIDIA-SMI has failed"),
    ('echo "0, [N/A]"\n', "could not convert string to float"),
])
def test_nvidia_smi_missing_or_failing_is_unknown_said_in_status_and_never_idle(tmp_path, smi_script, said):
    import json

    config = _busy_gpu_config(tmp_path, smi_script or "")
    if smi_script is None:
        config["nvidia_smi"] = str(tmp_path / "no-such-nvidia-smi")
    clock, sleep, armed = _clock_and_sleep([t * 10.0 for t in range(12)])    # four windows' worth
    assert w.watch(config, armed, clock, sleep) == "disarmed"
    assert not (tmp_path / "stopped").exists()
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["held_by"] == ["gpu"] and state["signals"]["gpu"]["state"] == "unknown"
    assert said in state["signals"]["gpu"]["said"]
    summary = autostop.summary({**state, "watcher_alive": True}, running=True)
    assert said in summary["unknown"]["gpu"]
    from devenv.cli.status_cmd import _autostop
    from devenv.env.info import EnvStatus

    row = EnvStatus(host="h", env="e", owner="me", runtime="host", state="running", autostop=summary)
    assert f"gpu unknown: {state['signals']['gpu']['said']}" in _autostop(row)


def test_the_tui_env_line_says_when_it_stops():
    """The monitor's env line (services/monitor_wiring.env_state -> tui/monitor_view.header) carries the
    watcher's words: "stops in 23 m" while it watches, "stopped: idle 90 m" once it acted, nothing otherwise."""
    from devenv.services.monitor import HostSnapshot
    from devenv.tui.monitor_view import HostExtras, header

    watching = {"state": "watching", "window_s": 5400, "idle_for_s": 1020, "stops_in_s": 4380,
                "watcher_alive": True}
    assert autostop.row_words(autostop.summary(watching, running=True)) == "stops in 73 m"
    stopped = {**watching, "state": "stopped", "reason": "idle 90 m"}
    assert autostop.row_words(autostop.summary(stopped, running=False)) == "stopped: idle 90 m"
    assert autostop.row_words(autostop.summary({**watching, "watcher_alive": False}, running=True)) == ""
    assert autostop.row_words(None) == ""
    snap = HostSnapshot(host="h200-box", state="ok", t=0.0)
    line = header(snap, HostExtras(env_state="running (cuda), stops in 73 m"), now=0.0).plain
    assert "env: running (cuda), stops in 73 m" in line


def test_sessions_of_openssh_9_8_and_later_count_too():
    """OpenSSH 9.8 split the per-session process off into sshd-session, whose title is
    "sshd-session: alice@notty": before, only "sshd: " titles counted, so on such a host an open session held
    nothing, on a bare host or in a container."""
    ws = "/home/alice/devenv-workspaces/cuda"
    procs = [proc(50, 1, "sshd: /usr/sbin/sshd -D [listener] 0 of 10-100 startups"),
             proc(60, 50, "sshd-session: alice [priv]"), proc(61, 60, "sshd-session: alice@notty", uid=1000),
             replace(proc(62, 61, "python train.py", uid=1000), cwd=ws)]
    assert [p.pid for p in w.sessions_on_host(procs, 1000, set(), ws)] == [61]
    inside = f"0::/system.slice/docker-{CID}.scope\n"
    box = [proc(100, 90, "/sbin/docker-init -- entrypoint", inside, 1),
           proc(101, 100, "/usr/sbin/sshd -D", inside, 5), proc(102, 101, "sshd-session: dev [priv]", inside, 6),
           proc(103, 102, "sshd-session: dev@pts/0", inside, 7), proc(104, 103, "-bash", inside, 8)]
    assert [p.pid for p in w.sessions_in_container(box, CID)] == [103]


# /proc/PID/cmdline of slurmstepd as read on the test host (Slurm 22.05.8, exec'd as /usr/sbin/slurmstepd: its
# retitle is cut to the 21 bytes of that argv, the rest of the old path after the NUL), and the SLURM_* part of
# its tasks' /proc/PID/environ (the batch step's task has no SLURM_STEP_ID)
def stepd(pid: int, raw: bytes, cgroup: str = "") -> w.Proc:
    return proc(pid, 1, w.cmdline_text(raw), cgroup)


def test_a_truncated_slurmstepd_title_still_finds_the_jobs_steps_and_their_sessions():
    """Slurm 22.05.8 cuts slurmstepd's title to the space of its argv: "slurmstepd: [368.0" (the closing "]"
    lost) for a 3-digit job. Before, the watcher wanted "[JOB.DIGITS]", found no step, said "sessions: none"
    and ended the job while an exec session was open."""
    procs = [stepd(10, b"slurmstepd: [368.b\0d\0"), proc(11, 10, "/bin/sh /spool/job00368/slurm_script"),
             stepd(20, b"slurmstepd: [368.0\0d\0"), proc(21, 20, "/usr/bin/sh -c echo ready; read line"),
             stepd(30, b"slurmstepd: [36.1]\0"), proc(31, 30, "bash")]       # job 36, its title whole
    none: dict[int, dict[str, str]] = {}
    assert [p.pid for p in w.sessions_in_job(procs, "368", none.__getitem__)] == [21]
    assert [p.pid for p in w.sessions_in_job(procs, "36", none.__getitem__)] == [31]
    assert w.sessions_in_job(procs, "3680", none.__getitem__) == []


def test_when_the_cut_title_cannot_tell_the_job_or_step_the_tasks_environment_does():
    """A 4-digit job loses the step ("[3360."), a 6-digit one (the second test cluster's 200443) even the "."
    ("[20044"), which is a prefix of job 20044's title as well as of 200443's and 200441's: then the step's
    tasks' SLURM_JOB_ID / SLURM_STEP_ID say whose step it is; a task whose environment cannot be read is no
    session of a job it cannot be shown to belong to."""
    procs = [stepd(10, b"slurmstepd: [3360.\0d\0"), proc(11, 10, "/bin/sh slurm_script"),
             stepd(20, b"slurmstepd: [3360.\0d\0"), proc(21, 20, "/usr/bin/sh -c read line"),
             stepd(30, b"slurmstepd: [20044\0d\0"), proc(31, 30, "/bin/sh slurm_script"),
             stepd(40, b"slurmstepd: [20044\0d\0"), proc(41, 40, "/usr/bin/sh -c read line"),
             stepd(50, b"slurmstepd: [20044\0d\0"), proc(51, 50, "python train.py"),
             stepd(60, b"slurmstepd: [20044\0d\0"), proc(61, 60, "bash")]
    environ = {11: {"SLURM_JOB_ID": "3360"}, 21: {"SLURM_JOB_ID": "3360", "SLURM_STEP_ID": "0"},
               31: {"SLURM_JOB_ID": "200443"}, 41: {"SLURM_JOB_ID": "200443", "SLURM_STEP_ID": "0"},
               51: {"SLURM_JOB_ID": "200441", "SLURM_STEP_ID": "3"}, 61: {}}
    assert [p.pid for p in w.sessions_in_job(procs, "3360", environ.__getitem__)] == [21]
    assert [p.pid for p in w.sessions_in_job(procs, "200443", environ.__getitem__)] == [41]
    assert [p.pid for p in w.sessions_in_job(procs, "200441", environ.__getitem__)] == [51]
    assert w.sessions_in_job(procs, "20044", environ.__getitem__) == []
    assert w.sessions_in_job(procs, "336", environ.__getitem__) == []


def test_a_prefix_of_another_jobs_id_is_not_this_job():
    """Job 33's steps are not job 336's, whether the title is whole, cut after the "." or cut inside the id."""
    procs = [stepd(10, b"slurmstepd: [336.0]\0"), proc(11, 10, "a"),
             stepd(20, b"slurmstepd: [336.0\0d\0"), proc(21, 20, "b"),
             stepd(30, b"slurmstepd: [33\0"), proc(31, 30, "c"),
             stepd(40, b"slurmstepd: [33.2]\0"), proc(41, 40, "d")]
    environ = {11: {}, 21: {}, 31: {"SLURM_JOB_ID": "336", "SLURM_STEP_ID": "4"}, 41: {}}
    assert [p.pid for p in w.sessions_in_job(procs, "33", environ.__getitem__)] == [41]
    assert [p.pid for p in w.sessions_in_job(procs, "336", environ.__getitem__)] == [11, 21, 31]
    assert w.sessions_in_job(procs, "3", environ.__getitem__) == []


def test_a_slurm_cgroup_path_names_the_job_and_step_before_the_title_does():
    """Where Slurm tracks steps by cgroup (v1: /slurm/uid_U/job_J/step_S/task_T; v2: a slurmstepd.scope's
    job_J/step_S), the task's cgroup decides: no title or environment needed, none read."""
    v1 = "4:memory:/slurm/uid_1000/job_{}/step_{}/task_0\n1:cpuset:/slurm/uid_1000/job_{}/step_{}\n"
    v2 = "0::/system.slice/node1_slurmstepd.scope/job_{}/step_{}/user/task_0\n"
    procs = [stepd(10, b"slurmstepd: [20044\0d\0"), proc(11, 10, "x", v1.format(200443, 0, 200443, 0)),
             stepd(20, b"slurmstepd: [20044\0d\0"), proc(21, 20, "y", v2.format(200443, "batch")),
             stepd(30, b"slurmstepd: [20044\0d\0"), proc(31, 30, "z", v2.format(200441, 2)),
             stepd(40, b"slurmstepd: [20044\0d\0"), proc(41, 40, "sleep 100000000", v2.format(200443, "extern"))]

    def unread(pid: int) -> dict[str, str]:
        raise AssertionError(f"environ of {pid} read")

    assert [p.pid for p in w.sessions_in_job(procs, "200443", unread)] == [11]
    assert [p.pid for p in w.sessions_in_job(procs, "200441", unread)] == [31]
    assert w.sessions_in_job(procs, "20044", unread) == []
