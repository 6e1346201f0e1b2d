"""Autostop on the real test host, with a window of a few seconds: the watcher runs on the host beside the
environment (a Docker container, or Jupyter on the bare host), holds while a session is open or a detached run
runs, stops the environment once idle, and the workspace comes back with `up`. Every wait is on an event (the
watcher's state file, the container's state), bounded; nothing sleeps for a time and nothing asserts one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from autostop_testing import (
    WINDOW,
    armed_note,
    busy_cell,
    held_through_windows,
    stopped_by_autostop,
    wait_for,
    watcher_state,
)

pytestmark = pytest.mark.integration

def start_session(test_env, host: str, env: str) -> subprocess.Popen:
    """An interactive `devenv exec` (stdin open: through the environment's shell), waiting on its stdin."""
    proc = test_env.popen("exec", host, "--env", env, "--", "sh", "-c", "echo ready; read line",
                          stdin=subprocess.PIPE)
    line = proc.stdout.readline()
    assert line.strip() == "ready", (line, proc.stderr.read() if proc.poll() is not None else "")
    return proc


def end_session(proc: subprocess.Popen) -> None:
    proc.stdin.close()
    proc.wait(60)


# a detached run (`devenv run`) that runs until a file appears in its working folder (the workspace)
UNTIL_GO = ["--", "sh", "-c", "while [ ! -e go ]; do sleep 0.2; done"]


def wait_run_state(test_env, host: str, env_args: list[str], run_id: str, state: str) -> None:
    def phase():
        listed = json.loads(test_env.run("runs", host, *env_args, "--json").stdout)
        return any(r["id"] == run_id and r["state"] == state for r in listed["hosts"][host]["runs"])
    wait_for(f"run {run_id} {state}", phase)


def test_docker_env_stops_when_idle_not_while_used_and_up_brings_it_back(test_env):
    env = test_env.name
    key = f"t-{env}"
    test_env.run("up", "testbox", "--env", env, "--detach")
    test_env.run("exec", "testbox", "--env", env, "--", "sh", "-c", "echo kept > /workspace/note")

    session = start_session(test_env, "testbox", env)
    try:   # armed by an `up` that reattaches while the session is open: the window cannot end before it
        up = json.loads(test_env.run("up", "testbox", "--env", env, "--detach", "--json", "--autostop",
                                     WINDOW).stdout)
        assert up["action"] == "reattached" and armed_note(up["notes"]), up
        held_through_windows(key, "sessions")
        assert test_env.state() == "running"
        listed = json.loads(test_env.run("status", "testbox", "--json").stdout)["environments"]
        mine = next(e for e in listed if e["env"] == env)
        assert mine["autostop"]["state"] == "watching" and "sessions" in mine["autostop"]["held_by"]
        assert {"active_gpu_s", "idle_gpu_s"} <= set(mine["autostop"])
        # a detached run in the container holds it too once the session is gone
        run_id = test_env.run("run", "testbox", "--env", env, *UNTIL_GO).stdout.strip()
        wait_run_state(test_env, "testbox", ["--env", env], run_id, "running")
    finally:
        end_session(session)
    held_through_windows(key, "runs")
    assert test_env.state() == "running"
    subprocess.run(["docker", "exec", test_env.container, "touch", "/workspace/go"], check=True, timeout=60)

    wait_for("the container stopped by autostop", lambda: test_env.state() == "exited")
    stopped_by_autostop(key)
    listed = json.loads(test_env.run("status", "testbox", "--json").stdout)["environments"]
    mine = next(e for e in listed if e["env"] == env)
    assert mine["state"] == "exited" and mine["autostop"]["state"] == "stopped"
    text = test_env.run("status", "testbox").stdout
    assert "stopped: idle 4 s" in text

    again = json.loads(test_env.run("up", "testbox", "--env", env, "--detach", "--json").stdout)
    assert again["action"] == "started", again
    assert test_env.run("exec", "testbox", "--env", env, "--", "cat", "/workspace/note").stdout == "kept\n"
    test_env.run("down", "testbox", "--env", env)
    assert not Path(os.path.expanduser(f"~/.devenv/autostop/{key}")).exists(), "down ends the watcher"


def test_bare_host_env_holds_while_a_detached_run_runs_then_stops(test_env, host_python):
    env = test_env.name
    host = f"bare-{env}"
    key = f"t-{env}"
    (test_env.home / "profiles" / "hosts" / f"{host}.yaml").write_text(
        f"description: the test host without Docker\nssh:\n  alias: testbox\nruntime: host\n"
        f"python: {host_python}\ndefault_env: {env}\n")
    workspace = os.path.expanduser(f"~/devenv-workspaces/{env}")
    try:
        up = json.loads(test_env.run("up", host, "--detach", "--json").stdout)
        pid = int(up["status"]["container"])
        test_env.run("exec", host, "--", "sh", "-c", "echo kept > note")
        run_id = test_env.run("run", host, *UNTIL_GO).stdout.strip()
        wait_run_state(test_env, host, [], run_id, "running")
        test_env.run("up", host, "--detach", "--autostop", WINDOW)    # armed while the run runs
        held_through_windows(key, "runs")
        assert Path(f"/proc/{pid}").exists()
        Path(workspace, "go").touch()              # the run ends

        stopped_by_autostop(key)
        wait_for("Jupyter ended", lambda: not Path(f"/proc/{pid}").exists())
        again = json.loads(test_env.run("up", host, "--detach", "--json").stdout)
        assert again["action"] == "started"
        assert Path(workspace, "note").read_text() == "kept\n"
    finally:
        Path(workspace, "go").touch(exist_ok=True) if Path(workspace).is_dir() else None
        test_env.run("down", host, "--purge", "--yes", check=False)
        shutil.rmtree(os.path.expanduser(f"~/.devenv/envs/{key}"), ignore_errors=True)
        shutil.rmtree(os.path.expanduser(f"~/.devenv/autostop/{key}"), ignore_errors=True)
        shutil.rmtree(workspace, ignore_errors=True)


# --- a GPU and a kernel: on a bare host whose nvidia-smi is tests/replay's H200 recording held at a tick where
# GPU 0 is under load and GPU 1 idle (env_testing.replay_gpu_host: our own sshd, its sessions' PATH has the replay)


@pytest.fixture
def bare_gpubox(tmp_path, host_python):
    from env_testing import replay_gpu_host
    from sshd_fixture import free_port

    with replay_gpu_host(tmp_path, "bare", f"runtime: host\npython: {host_python}\n") as box:
        for env, gpus in (("busy", "[0]"), ("idle", "[1]")):
            (box.home / "profiles" / "envs" / f"{env}.yaml").write_text(
                f"image: devenv/pytorch:unused-on-a-bare-host\ngpus: {gpus}\nports:\n  jupyter: {free_port()}\n")
        try:
            yield box, tmp_path / "sshd" / "home"     # the replay sshd's sessions' HOME: the watchers are there
        finally:
            for env in ("busy", "idle"):
                box.devenv("down", "bare", "--env", env, "--purge", "--yes")


def test_bare_host_env_holds_while_its_gpu_is_busy_or_a_kernel_runs_a_cell_then_stops(bare_gpubox):
    """Two environments on one host, the same window: the one on the busy GPU is held by "gpu" all along; the one
    on the idle GPU is held while a kernel runs a cell (executed through Jupyter's real API), then stops once the
    cell is done, and `up` brings it back with its workspace."""
    box, home = bare_gpubox

    def state_of(env: str) -> dict:
        return watcher_state(f"t-{env}", home)

    def held(env: str, holder: str) -> dict:
        return held_through_windows(f"t-{env}", holder, home)

    def up(env: str, *args: str) -> dict:
        done = box.devenv("up", "bare", "--env", env, "--detach", "--json", *args)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    busy = up("busy", "--autostop", WINDOW)
    busy_pid = int(busy["status"]["container"])
    state = held("busy", "gpu")
    assert state["signals"]["gpu"] == {"state": "active", "said": state["signals"]["gpu"]["said"]}
    assert state["signals"]["gpu"]["said"].startswith("GPU 0 ")

    idle = up("idle")
    idle_pid = int(idle["status"]["container"])
    workspace = home / "devenv-workspaces" / "idle"
    (workspace / "note").write_text("kept\n")
    go = workspace / "go"
    url = f"http://127.0.0.1:{idle['jupyter']['host_port']}/lab?token={idle['jupyter']['token']}"
    with busy_cell(url, str(go), go.touch):
        armed = up("idle", "--autostop", WINDOW)
        assert armed_note(armed["notes"]), armed["notes"]
        state = held("idle", "jupyter")
        assert state["signals"]["gpu"]["state"] == "idle", state      # GPU 1: the kernel alone holds it
        assert Path(f"/proc/{idle_pid}").exists()
    stopped_by_autostop("t-idle", home)
    wait_for("its Jupyter ended", lambda: not Path(f"/proc/{idle_pid}").exists())

    # all the while, the env on the busy GPU was held by it, and still is
    state = state_of("busy")
    assert state["state"] == "watching" and state["held_by"] == ["gpu"], state
    assert Path(f"/proc/{busy_pid}").exists()
    text = box.devenv("status", "bare").stdout
    assert "stopped: idle 4 s" in text and "in use (gpu)" in text, text

    again = up("idle")
    assert again["action"] == "started", again
    assert (workspace / "note").read_text() == "kept\n"


def test_docker_env_holds_while_a_kernel_runs_a_cell_then_stops(test_env):
    """A cell executed through Jupyter's real API (a loop of time.sleep until a file appears) holds the
    container; once it is done the container stops."""
    env = test_env.name
    key = f"t-{env}"
    up = json.loads(test_env.run("up", "testbox", "--env", env, "--detach", "--json").stdout)
    url = f"http://127.0.0.1:{up['jupyter']['host_port']}/lab?token={up['jupyter']['token']}"

    def finish() -> None:
        subprocess.run(["docker", "exec", test_env.container, "touch", "/workspace/go"], timeout=60)

    with busy_cell(url, "/workspace/go", finish):
        test_env.run("up", "testbox", "--env", env, "--detach", "--autostop", WINDOW)
        state = held_through_windows(key, "jupyter")
        assert state["held_by"] == ["jupyter"], state
        assert test_env.state() == "running"
    wait_for("the container stopped by autostop", lambda: test_env.state() == "exited")
    stopped_by_autostop(key)
    again = json.loads(test_env.run("up", "testbox", "--env", env, "--detach", "--json").stdout)
    assert again["action"] == "started", again
    test_env.run("down", "testbox", "--env", env)


def test_bare_host_env_holds_while_an_exec_session_is_open_then_stops(test_env, host_python):
    """An interactive `devenv exec` into a bare-host environment (an sshd session running a shell in its
    workspace) holds it; once the session ends, it stops."""
    env = test_env.name
    host = f"bare-{env}"
    key = f"t-{env}"
    (test_env.home / "profiles" / "hosts" / f"{host}.yaml").write_text(
        f"description: the test host without Docker\nssh:\n  alias: testbox\nruntime: host\n"
        f"python: {host_python}\ndefault_env: {env}\n")
    workspace = os.path.expanduser(f"~/devenv-workspaces/{env}")
    try:
        up = json.loads(test_env.run("up", host, "--detach", "--json").stdout)
        pid = int(up["status"]["container"])
        session = start_session(test_env, host, env)
        try:
            test_env.run("up", host, "--detach", "--autostop", WINDOW)
            state = held_through_windows(key, "sessions")
            assert state["held_by"] == ["sessions"], state
            assert Path(f"/proc/{pid}").exists()
        finally:
            end_session(session)
        stopped_by_autostop(key)
        wait_for("Jupyter ended", lambda: not Path(f"/proc/{pid}").exists())
    finally:
        test_env.run("down", host, "--purge", "--yes", check=False)
        shutil.rmtree(os.path.expanduser(f"~/.devenv/envs/{key}"), ignore_errors=True)
        shutil.rmtree(os.path.expanduser(f"~/.devenv/autostop/{key}"), ignore_errors=True)
        shutil.rmtree(workspace, ignore_errors=True)


# --- a Docker-runtime environment on a GPU: the watcher runs on the host beside the container (never inside it:
# the container's restart policy would start it again), so the nvidia-smi it samples is the host's. The host is
# env_testing.replay_gpu_host (our own sshd: its sessions' PATH has tests/replay's H200 recording, at the tick a
# file holds); the engine is rootful podman, which takes the GPU through a CDI spec of our own (the test host's
# dockerd 20.10 has neither CDI nor NVIDIA's toolkit, so no GPU can reach a container of it)


@pytest.fixture
def podman_gpubox(tmp_path, testhost, podman_slim_image):
    import secrets

    from env_testing import podman_env_leftovers, replay_cdi_spec, replay_gpu_host, slim_profile
    from sshd_fixture import free_port

    token = secrets.token_hex(4)
    tick = tmp_path / "tick"
    tick.write_text("30\n")       # the recording's tick 30: GPU 0 under load, GPU 1 idle
    with replay_cdi_spec(token), replay_gpu_host(tmp_path, "gpubox", "runtime: docker\nengine: podman\n",
                                                 tick_file=tick) as box:
        env = f"as-{token}"
        profile = slim_profile(image=podman_slim_image, ports={"jupyter": free_port(), "ssh": free_port()})
        (box.home / "profiles" / "envs" / f"{env}.yaml").write_text(profile.replace("gpus: none", "gpus: 1"))
        try:
            yield box, env, tick, tmp_path / "sshd" / "home"   # the replay sshd's sessions' HOME: the watcher's
        finally:
            box.devenv("down", "gpubox", "--env", env, "--purge", "--yes")
            podman_env_leftovers(env)


@pytest.mark.timeout(600)    # with podman_slim_image: the first podman test of a run builds the image
def test_docker_env_holds_while_its_gpu_is_busy_then_stops_and_up_brings_it_back(podman_gpubox):
    """Held by "gpu" while the environment's GPU is under load, through three windows; once its GPU is idle it
    stops, although the host's other GPU (not the environment's) is still under load."""
    from env_testing import podman

    box, env, tick, home = podman_gpubox
    key = f"t-{env}"

    def up(*args: str) -> dict:
        done = box.devenv("up", "gpubox", "--env", env, "--detach", "--json", *args)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def state() -> str:
        return podman("inspect", "-f", "{{.State.Status}}", up_["status"]["container"]).stdout.strip()

    up_ = up()
    assert up_["status"]["gpus"] == "1", up_          # the free one
    assert box.devenv("exec", "gpubox", "--env", env, "--", "sh", "-c", "echo kept > /workspace/note").returncode == 0
    tick.write_text("20\n")     # tick 20: GPU 0 under load, and GPU 1 too (the recording 7 ticks on: tick 27)
    armed = up("--autostop", WINDOW)
    assert armed["action"] == "reattached" and armed_note(armed["notes"]), armed
    held = held_through_windows(key, "gpu", home)
    assert held["held_by"] == ["gpu"], held
    assert held["signals"]["gpu"]["state"] == "active" and held["signals"]["gpu"]["said"].startswith("GPU 1 "), held
    assert state() == "running"
    text = box.devenv("status", "gpubox").stdout
    assert "in use (gpu)" in text, text

    tick.write_text("30\n")     # GPU 1 idle (tick 37), GPU 0 still under load: not this environment's GPU
    stopped = stopped_by_autostop(key, home)
    assert stopped["signals"]["gpu"]["state"] == "idle" and stopped["active_gpu_s"] > 0, stopped
    wait_for("the container stopped by autostop", lambda: state() == "exited")
    text = box.devenv("status", "gpubox").stdout
    assert "stopped: idle 4 s" in text, text

    again = up()
    assert again["action"] == "started", again
    note = box.devenv("exec", "gpubox", "--env", env, "--", "cat", "/workspace/note")
    assert note.stdout == "kept\n", note.stderr
