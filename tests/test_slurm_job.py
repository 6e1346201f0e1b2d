"""A devenv environment as a Slurm job (L0): settings validated at the boundary, each value one option word."""

from __future__ import annotations

import shlex

import pytest

from devenv.cluster import slurm_job
from devenv.cluster.slurm_job import JobRequest, SettingError, SlurmSettings
from devenv.config.profiles import parse_host
from devenv.errors import ProfileError


def request(**settings) -> JobRequest:
    return JobRequest(SlurmSettings(**settings), "devenv-me-cpu", "abc123", "/home/me/.devenv/envs/me-cpu/job-%j.log",
                      "/home/me/devenv-workspaces/cpu")


def test_every_setting_becomes_one_option_word():
    words = request(partition="gpu", account="proj-1", qos="normal", time="1-00:00:00", nodes=2, gpus_per_node=8,
                    gpu_type="h100", cpus_per_gpu=12, mem_per_gpu="80G", constraint="ib&h100",
                    extra_sbatch=("--exclusive", "--mail-type=END")).options()
    assert words == ["--job-name=devenv-me-cpu", "--nodes=2", "--ntasks-per-node=1", "--no-requeue",
                     "--time=1-00:00:00", "--output=/home/me/.devenv/envs/me-cpu/job-%j.log",
                     "--chdir=/home/me/devenv-workspaces/cpu", "--comment=devenv:abc123", "--partition=gpu",
                     "--account=proj-1", "--qos=normal", "--gres=gpu:h100:8", "--cpus-per-gpu=12",
                     "--mem-per-gpu=80G", "--constraint=ib&h100", "--exclusive", "--mail-type=END"]


def test_the_command_line_splits_back_into_exactly_those_words():
    req = request(partition="gpu", constraint="a100|h100")
    argv = shlex.split(req.command())
    assert argv == ["sbatch", "--parsable", *req.options()]


@pytest.mark.parametrize("settings, field", [
    ({"partition": "--wrap=rm -rf ~"}, "partition"),
    ({"partition": "gpu;id"}, "partition"),
    ({"account": "-A"}, "account"),
    ({"qos": "a b"}, "qos"),
    ({"time": "1h"}, "time"),
    ({"time": "00:10:00 --wrap=x"}, "time"),
    ({"mem_per_gpu": "80 G", "gpus_per_node": 1}, "mem_per_gpu"),
    ({"constraint": "a b"}, "constraint"),
    ({"constraint": "-x"}, "constraint"),
    ({"extra_sbatch": ("-p debug",)}, "extra_sbatch"),
    ({"extra_sbatch": ("--wrap=id",)}, "extra_sbatch"),
    ({"extra_sbatch": ("--job-name=x",)}, "extra_sbatch"),
    ({"extra_sbatch": ("--mail-user=a b",)}, "extra_sbatch"),
    ({"extra_sbatch": ("--export=ALL,LD_PRELOAD=/x",)}, "extra_sbatch"),
    ({"gpu_type": "a100"}, "gpu_type"),
    ({"cpus_per_gpu": 4}, "cpus_per_gpu"),
])
def test_values_that_could_become_options_or_commands_are_refused(settings, field):
    with pytest.raises(SettingError) as caught:
        request(**settings).options()
    assert caught.value.field == field and caught.value.hint


def test_the_profile_names_the_file_line_and_field_of_a_bad_setting():
    text = "ssh: {alias: login}\nruntime: slurm\nslurm:\n  partition: gpu\n  time: 2 hours\n"
    with pytest.raises(ProfileError) as caught:
        parse_host(text, "cluster", "cluster.yaml")
    assert str(caught.value).startswith("cluster.yaml:5: field 'slurm.time' '2 hours' is not a Slurm time limit")
    assert caught.value.exit_code == 2


def test_a_slurm_profile_needs_a_login_node_and_slurm_settings_need_the_slurm_runtime():
    with pytest.raises(ProfileError, match="needs 'ssh' to the cluster's login node"):
        parse_host("local: true\nruntime: slurm\n", "c", "c.yaml")
    with pytest.raises(ProfileError, match="field 'slurm' is set but runtime is 'docker'"):
        parse_host("ssh: {alias: a}\nslurm: {partition: gpu}\n", "c", "c.yaml")
    host = parse_host("ssh: {alias: a}\nruntime: slurm\n", "c", "c.yaml")
    assert host.slurm == SlurmSettings()


def test_batch_script_execs_the_launcher_with_quoted_paths():
    script = slurm_job.batch_script("/opt/my venv/bin/python", "/home/me/.devenv/envs/k/launch.py",
                                    "/home/me/.devenv/envs/k", "/home/me/devenv-workspaces/cpu", 8888)
    last = script.strip().splitlines()[-1]
    assert shlex.split(last) == ["exec", "/opt/my venv/bin/python", "/home/me/.devenv/envs/k/launch.py",
                                 "/home/me/.devenv/envs/k", "/home/me/devenv-workspaces/cpu", "8888"]
    with pytest.raises(SettingError):
        slurm_job.batch_script("python3", "relative/launch.py", "/d", "/w", 1)


def test_relay_is_one_task_on_one_node_of_the_job():
    argv = shlex.split(slurm_job.relay_command("123", "node7", "python3", 8888))
    assert argv[:9] == ["srun", "--overlap", "--jobid=123", "--nodes=1", "--ntasks=1", "--nodelist=node7",
                        "--unbuffered", "--quiet", "--"]
    assert argv[9:12] == ["python3", "-u", "-c"] and argv[-1] == "8888"
    with pytest.raises(SettingError):
        slurm_job.relay_command("12;id", "node7", "python3", 8888)
    with pytest.raises(SettingError):
        slurm_job.relay_command("12", "-w", "python3", 8888)


def _relay(*args: str):
    import subprocess
    import sys

    return subprocess.Popen([sys.executable, "-u", "-c", slurm_job.RELAY, *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _echo_server(port: int = 0):
    """A one-connection server on 127.0.0.1 answering each chunk with 'echo:' + it; (port, thread)."""
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", port))

    def serve():
        conn, _ = listener.accept()
        with conn:
            while data := conn.recv(1024):
                conn.sendall(b"echo:" + data)
        listener.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener.getsockname()[1], thread


def test_the_early_relay_waits_for_the_launchers_port_then_relays(tmp_path):
    """Started before Jupyter listens (the job's first relay, while `up` waits): no state file yet, then a port
    that does not answer yet; it keeps trying and carries bytes once the server is there."""
    import json
    import socket
    import time

    state = tmp_path / "job-7.json"
    relay = _relay("0", "30", str(state))
    time.sleep(0.3)
    assert relay.poll() is None                        # no state file yet: still waiting
    with socket.socket() as probe:                     # a port nobody listens on yet
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    (tmp_path / "job-7.json.tmp").write_text(json.dumps({"port": port}))
    (tmp_path / "job-7.json.tmp").replace(state)
    time.sleep(0.3)
    assert relay.poll() is None                        # refused: still waiting
    _echo_server(port)
    out, err = relay.communicate(b"hello", timeout=30)
    assert out == b"echo:hello" and relay.returncode == 0, err


def test_the_plain_relay_still_fails_at_once_when_nothing_listens():
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    relay = _relay(str(port))
    out, err = relay.communicate(b"", timeout=30)
    assert relay.returncode != 0 and b"ConnectionRefusedError" in err
    port, _ = _echo_server()
    out, _ = _relay(str(port)).communicate(b"hi", timeout=30)
    assert out == b"echo:hi"


def test_the_early_relay_command_names_the_state_file_and_its_wait():
    argv = shlex.split(slurm_job.early_relay_command("123", "node7", "python3", "/h/.devenv/envs/k/job-123.json",
                                                     180))
    assert argv[8] == "--" and argv[9:12] == ["python3", "-u", "-c"]
    assert argv[-3:] == ["0", "180", "/h/.devenv/envs/k/job-123.json"]
    with pytest.raises(SettingError):
        slurm_job.early_relay_command("123", "node7", "python3", "~/job.json", 180)


# A stand-in for `python -m jupyterlab` as the launcher execs it: waits for a line on stdin (so the test chooses when
# it binds), then binds its --ServerApp.port as Jupyter does (tornado sets SO_REUSEADDR; port_retries 0: a port in
# use ends it), says which, and stays until stdin closes.
_JUPYTER_STUB = """\
import socket, sys
port = int([a for a in sys.argv if a.startswith("--ServerApp.port=")][0].split("=", 1)[1])
sys.stdin.readline()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("127.0.0.1", port))
    s.listen()
except OSError as e:
    print("jupyter failed: port %d: %s" % (port, e), flush=True)
    sys.exit(1)
print("jupyter listening on %d" % port, flush=True)
sys.stdin.read()
"""


def test_two_jobs_on_one_node_starting_together_get_two_ports_and_both_jupyters_start(tmp_path):
    """Two environment jobs on one node, their launchers one after the other before either Jupyter has bound (it
    imports for seconds): the second launcher found the preferred port free, recorded it too, and its Jupyter
    (port_retries 0) failed to start, while `up` waited on a port that was the other job's. Now the launcher holds
    the port it records until its Jupyter binds it: the second gets another one, and both Jupyters start."""
    import json
    import os
    import socket
    import subprocess
    import sys

    stub = tmp_path / "stub" / "jupyterlab"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("")
    (stub / "__main__.py").write_text(_JUPYTER_STUB)
    (tmp_path / "launch.py").write_text(slurm_job.LAUNCHER)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        preferred = probe.getsockname()[1]

    launchers = []
    try:
        for job in ("101", "102"):
            env_dir = tmp_path / f"env-{job}"
            env_dir.mkdir()
            environ = {**os.environ, "SLURM_JOB_ID": job, "SLURMD_NODENAME": "node1",
                       "PYTHONPATH": str(stub.parent)}
            launcher = subprocess.Popen([sys.executable, str(tmp_path / "launch.py"), str(env_dir),
                                         str(tmp_path / "workspace"), str(preferred)], env=environ, text=True,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            launchers.append(launcher)
            said = launcher.stdout.readline()   # the launcher's last line before it becomes Jupyter
            assert said.startswith(f"devenv: jupyter for job {job} on node1 port "), said
        ports = [json.loads((tmp_path / f"env-{job}" / f"job-{job}.json").read_text())["port"]
                 for job in ("101", "102")]
        assert ports[0] == preferred and ports[1] != preferred, ports
        for launcher in launchers:
            launcher.stdin.write("bind\n")
            launcher.stdin.flush()
        said = [launcher.stdout.readline().strip() for launcher in launchers]
        assert said == [f"jupyter listening on {port}" for port in ports], said
    finally:
        for launcher in launchers:
            launcher.stdin.close()
            launcher.wait(timeout=30)
