"""Autostop on a Slurm cluster with a GPU: the environment's job is held while its GPU is busy and, once the GPU is
idle, ends by itself (COMPLETED; status "stopped: idle 4 s").

The test host's two shared clusters have no GPU gres, and their daemons are not ours to change, so this test
starts a private one-node cluster of its own (private_gpu_cluster): its own slurm.conf and gres.conf (GresTypes=gpu,
node Gres=gpu:1 whose device file is a fake char device made under the test's tmp_path), its own state, its own
slurmctld + slurmd on free loopback ports (never the shared clusters' 16817-17500), the machine's munge. The login
node is an sshd of our own (monitor_helpers.replay_sshd) whose sessions get that cluster's SLURM_CONF and a PATH with
tests/replay's H200 nvidia-smi recording; sbatch exports the login's environment to the job, so the watcher in the
job samples the replay, held at the tick a file holds (tick 20: under the matmul load; tick 5: idle).

The node has one GPU and the job asks for it (slurm.gpus_per_node: 1): Slurm hands it to the job (SLURM_JOB_GPUS,
CUDA_VISIBLE_DEVICES), which is what makes the watcher in the job sample GPUs at all, and nvidia-smi in the job shows
that GPU only, as on a cluster whose cgroups constrain devices: the busy GPU is the job's GPU. Every wait is on an
event, bounded; nothing asserts a time (tests/autostop_testing.py).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from autostop_testing import WINDOW, armed_note, held_through_windows, stopped_by_autostop, wait_for

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
NODE = "gpunode"
BUSY, IDLE = "20", "5"     # ticks of the recording (0.5 s each): 16-31 under the matmul load, 0-14 idle


def slurm(conf: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=60,
                          env={**os.environ, "SLURM_CONF": str(conf)})


def jobs(conf: Path) -> list[list[str]]:
    """id, name, state of every job the private cluster knows."""
    out = slurm(conf, "squeue", "--noheader", "--states=all", "--format=%i|%j|%T").stdout
    return [line.split("|") for line in out.splitlines() if line.strip()]


def live(conf: Path) -> list[list[str]]:
    return [j for j in jobs(conf) if j[2] in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING")]


def distinct_free_ports(n: int) -> list[int]:
    from sshd_fixture import free_port

    ports: list[int] = []
    while len(ports) < n:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


def daemon_pid(pid_file: Path, name: str) -> int | None:
    try:
        pid = int(pid_file.read_text().split()[0])
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError, IndexError):
        return None
    return pid if name.encode() in cmdline else None


@contextmanager
def private_gpu_cluster(root: Path) -> Iterator[Path]:
    """A one-node Slurm cluster under root (slurmctld + slurmd -N gpunode, one GPU of gres whose device file is a
    char device made under root, never in /dev); yields its slurm.conf. On leaving: its jobs cancelled and gone, its
    two daemons ended (by their pid files' ids), its state removed (its logs kept in root's parent)."""
    root.mkdir(parents=True, exist_ok=True)
    device = root / "nvidia0"
    os.mknod(device, 0o600 | stat.S_IFCHR, os.makedev(195, 0))     # the NVIDIA driver's major number
    ctld_port, node_port = distinct_free_ports(2)
    # slurmd's step sockets (SPOOL/NODE_JOBID.STEPID) must fit 108 bytes: a tmp_path under pytest's basetemp can
    # be too long for that, so the spool is a short folder of /tmp of its own
    spool = Path(tempfile.mkdtemp(prefix="devenv-slurmd-"))
    conf = root / "slurm.conf"
    conf.write_text(textwrap.dedent(f"""\
        # a private cluster of one test (tests/integration/slurm/test_slurm_gpu_autostop.py)
        ClusterName=devenvgpu
        FirstJobId=600000
        SlurmctldHost=localhost
        SlurmctldPort={ctld_port}
        SlurmUser=root
        AuthType=auth/munge
        CredType=cred/munge
        StateSaveLocation={root}/ctld
        SlurmdSpoolDir={spool}
        SlurmctldPidFile={root}/slurmctld.pid
        SlurmdPidFile={root}/slurmd-%n.pid
        SlurmctldLogFile={root}/slurmctld.log
        SlurmdLogFile={root}/slurmd-%n.log
        ProctrackType=proctrack/linuxproc
        TaskPlugin=task/none
        SelectType=select/cons_tres
        SelectTypeParameters=CR_Core
        SchedulerType=sched/backfill
        MpiDefault=none
        JobCompType=jobcomp/none
        AccountingStorageType=accounting_storage/none
        GresTypes=gpu
        ReturnToService=2
        KillWait=5
        MinJobAge=300
        NodeName={NODE} NodeHostname=localhost Port={node_port} CPUs={os.cpu_count() or 1} RealMemory=1024 \
Gres=gpu:1 State=UNKNOWN
        PartitionName=gpu Nodes={NODE} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
        """))
    (root / "gres.conf").write_text(f"NodeName={NODE} Name=gpu File={device}\n")
    try:
        for command in (["slurmctld"], ["slurmd", "-N", NODE]):     # each daemonizes once it is up
            done = slurm(conf, *command)
            assert done.returncode == 0, f"{command[0]}: {done.stderr} (read {root}/*.log)"
        wait_for(f"{NODE} idle", lambda: slurm(conf, "sinfo", "-h", "-N", "-o", "%t").stdout.split() == ["idle"],
                 bound=90)
        yield conf
    finally:
        for job in live(conf):
            slurm(conf, "scancel", job[0])
        try:
            wait_for("the private cluster's jobs gone", lambda: not live(conf), bound=90)
        finally:
            for pid_file, name in ((root / f"slurmd-{NODE}.pid", "slurmd"), (root / "slurmctld.pid", "slurmctld")):
                pid = daemon_pid(pid_file, name)
                if pid is not None:
                    os.kill(pid, signal.SIGTERM)
                    wait_for(f"{name} {pid} ended", lambda pid=pid: not Path(f"/proc/{pid}").exists(), bound=60)
            for log in root.glob("*.log"):      # kept beside it, with the test's tmp_path, to read after a failure
                shutil.copy(log, root.parent / f"{root.name}-{log.name}")
            shutil.rmtree(root, ignore_errors=True)
            shutil.rmtree(spool, ignore_errors=True)


@pytest.fixture
def gpu_cluster(tmp_path, cluster_python):
    """A host profile `gpucluster` in a fresh DEVENV_HOME: runtime slurm, one GPU per node, its login an sshd of our
    own on the private cluster (SLURM_CONF, nvidia-smi = the replay at the tick `tick` holds). Yields (environ for
    devenv, the cluster's slurm.conf, the tick file, the login's HOME: workspaces and the watcher's state)."""
    from monitor_helpers import replay_sshd
    from sshd_fixture import make_key

    tick = tmp_path / "tick"
    tick.write_text(BUSY + "\n")
    with private_gpu_cluster(tmp_path / "slurm") as conf:
        key = make_key(tmp_path / "id_ed25519")
        home = tmp_path / "home"
        (home / "profiles" / "hosts").mkdir(parents=True)
        (home / "profiles" / "envs").mkdir(parents=True)
        environ = {k: v for k, v in os.environ.items() if not k.startswith(("DEVENV_", "SLURM_"))
                   and k != "SSH_AUTH_SOCK"}
        environ.update({"DEVENV_HOME": str(home), "DEVENV_KNOWN_HOSTS": str(home / "known_hosts"),
                        "DEVENV_SSH_CONFIG": str(home / "ssh_config"), "DEVENV_OWNER": "t",
                        "PYTHONUNBUFFERED": "1"})
        server = replay_sshd(tmp_path / "sshd", key, env={"REPLAY_GPUS": "1", "REPLAY_TICK_FILE": str(tick),
                                                          "SLURM_CONF": str(conf)})
        with server:
            (home / "known_hosts").write_text(server.known_hosts_line())
            (home / "profiles" / "hosts" / "gpucluster.yaml").write_text(textwrap.dedent(f"""\
                ssh:
                  hostname: 127.0.0.1
                  port: {server.port}
                  user: root
                  identity_file: {key.path}
                  connect_timeout: 5
                runtime: slurm
                python: {cluster_python}
                default_env: gpu
                slurm:
                  partition: gpu
                  time: "00:10:00"
                  gpus_per_node: 1
                """))
            (home / "profiles" / "envs" / "gpu.yaml").write_text(textwrap.dedent("""\
                description: a GPU environment on the private cluster (the nodes' python, JupyterLab)
                image: unused-on-slurm
                ports:
                  jupyter: 8888
                """))
            try:
                yield environ, conf, tick, tmp_path / "sshd" / "home"
            finally:
                subprocess.run([sys.executable, "-m", "devenv", "down", "gpucluster"], capture_output=True,
                               timeout=180, env=environ, cwd=REPO, input="")


def test_slurm_env_holds_while_its_gpu_is_busy_then_ends_its_own_job(gpu_cluster):
    environ, conf, tick, home = gpu_cluster
    key = "t-gpu"

    def devenv(*args: str) -> subprocess.CompletedProcess:
        done = subprocess.run([sys.executable, "-m", "devenv", *args], capture_output=True, text=True,
                              timeout=400, env=environ, cwd=REPO, input="")
        assert "Traceback" not in done.stderr, done.stderr
        assert done.returncode == 0, done.stderr
        return done

    up = json.loads(devenv("up", "gpucluster", "--detach", "--json").stdout)
    job_id = up["status"]["job_id"]
    assert [j[0] for j in live(conf)] == [job_id]
    armed = json.loads(devenv("up", "gpucluster", "--detach", "--json", "--autostop", WINDOW).stdout)
    assert armed["action"] == "reattached" and armed_note(armed["notes"]), armed

    # the job's GPU under load: held by "gpu" through three windows' worth of samples, the job still running
    held = held_through_windows(key, "gpu", home)
    assert held["held_by"] == ["gpu"] and held["job_id"] == job_id, held
    assert held["signals"]["gpu"]["state"] == "active" and held["signals"]["gpu"]["said"].startswith("GPU 0 "), held
    assert [(j[0], j[2]) for j in live(conf)] == [(job_id, "RUNNING")]
    text = devenv("status", "gpucluster").stdout
    assert "in use (gpu)" in text, text

    tick.write_text(IDLE + "\n")    # the GPU idle: nothing holds the job any more
    stopped = stopped_by_autostop(key, home)
    assert stopped["signals"]["gpu"]["state"] == "idle" and stopped["active_gpu_s"] > 0, stopped
    wait_for("the job ended by itself", lambda: not live(conf))
    assert [j[2] for j in jobs(conf) if j[0] == job_id] == ["COMPLETED"], jobs(conf)
    text = devenv("status", "gpucluster").stdout
    assert "stopped: idle 4 s" in text, text
