"""Fixtures for the Slurm paths against the test host's real clusters: slurmctld + slurmd node1/node2 on this
machine, the test sshd (`testbox`) as the login node, and the second one (node3/node4, `testbox-cluster2`); a test
gets the one tests/slurm_clusters.py gives it, with its SLURM_CONF set. Run under the integration lock:

    flock /tmp/devenv-it.lock python3 -m pytest -q tests/integration/slurm

Each test gets its own DEVENV_HOME with a `testcluster` profile (its cluster's login node), its own environment
name, and a finalizer that cancels whatever job of that name is still alive (and the `devenv-check` /
`devenv-sanity` jobs submitted during the test, never another's) and then fails the test if one had to be
cancelled: "no orphan job" is asserted, not assumed.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import slurm_clusters
from slurm_clusters import SlurmCluster

from testhost import apply_testhost_env, jupyterlab_venv, testhost, testhost_dir, testhost_env  # noqa: F401  (fixtures)

REPO = Path(__file__).resolve().parents[3]
OWNER = "t"


def squeue(*args: str) -> list[list[str]]:
    out = subprocess.run(["squeue", "--noheader", "--states=all", "--format=%i|%j|%T|%r|%N", *args],
                         capture_output=True, text=True, timeout=30).stdout
    return [line.split("|") for line in out.splitlines() if line.strip()]


def live_jobs(name: str) -> list[list[str]]:
    return [j for j in squeue(f"--name={name}") if j[2] in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING")]


def wait_for(predicate, timeout: float, what: str, every: float = 1.0):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f} s: {what}")
        time.sleep(every)


def testhost_cluster_python() -> str | None:
    """The python testhost/setup made for the cluster, if it has JupyterLab and torch (testhost.made_cluster_python)."""
    from testhost import made_cluster_python

    return made_cluster_python()


@pytest.fixture(scope="session")
def cluster_python(tmp_path_factory) -> str:
    """A python the compute nodes see (this machine's file system) with JupyterLab and torch: the one
    testhost/setup builds once per machine, else (a test host set up before it did) a venv made here."""
    made = testhost_cluster_python()
    if made:
        return made
    return jupyterlab_venv(tmp_path_factory.mktemp("slurm-python"))


@dataclass
class Cluster:
    home: Path
    environ: dict[str, str]
    python: str
    env: str
    slurm: SlurmCluster = slurm_clusters.CLUSTER1
    host: str = "testcluster"
    cancelled: list[str] = field(default_factory=list)

    @property
    def job_name(self) -> str:
        return f"devenv-{OWNER}-{self.env}"

    owner = OWNER

    @property
    def workspace(self) -> Path:
        """Where the environment's workspace lies (the login node's home, shared with the nodes)."""
        return Path(os.path.expanduser(f"~/devenv-workspaces/{self.env}"))

    def write_profile(self, **slurm) -> None:
        settings = {"partition": "debug", "time": "00:10:00", **slurm}
        lines = "".join(f"  {k}: {v if isinstance(v, int) else repr(str(v))}\n" for k, v in settings.items())
        (self.home / "profiles" / "hosts" / f"{self.host}.yaml").write_text(textwrap.dedent(f"""\
            description: the test host's Slurm cluster (login node = the test sshd)
            ssh:
              alias: {self.slurm.alias}
            runtime: slurm
            python: {self.python}
            default_env: {self.env}
            slurm:
            """) + lines)
        (self.home / "profiles" / "envs" / f"{self.env}.yaml").write_text(textwrap.dedent("""\
            description: a CPU environment for the Slurm tests (the nodes' python, JupyterLab)
            image: unused-on-slurm
            ports:
              jupyter: 8888
            gpus: none
            """))

    def run(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "devenv", *args], capture_output=True, text=True,
                              timeout=timeout, env=self.environ, cwd=REPO, input="")
        print(f"[{time.monotonic() - started:6.2f}s] devenv {' '.join(args)} -> {done.returncode}")
        return done

    def service(self):
        """The Slurm backend in this process, on the login node's connection (as the CLI builds it)."""
        from devenv.config import hostref
        from devenv.remote.pool import get_connection
        from devenv.runtimes.host_runtime import HostRuntime
        from devenv.schedulers.slurm import Slurm
        from devenv.services.environments.slurm.backend import SlurmEnvironments

        host = hostref.load_host(self.host)
        conn = get_connection(host)
        return SlurmEnvironments(host, conn, Slurm(conn, host.name), HostRuntime(conn, host), owner=OWNER)


from devenv.services.environments.contract import QuietEvents  # noqa: E402


class Events(QuietEvents):
    """What `up` says while it works, kept for the asserts."""

    def __init__(self):
        self.steps: list[str] = []

    def step(self, text: str) -> None:
        print("step:", text)
        self.steps.append(text)

    def confirm(self, question, diff) -> bool:
        return True


@pytest.fixture
def cluster(testhost, cluster_python, monkeypatch, tmp_path, request) -> Cluster:  # noqa: F811
    applied = apply_testhost_env(monkeypatch, testhost.env, tmp_path)
    monkeypatch.setenv("DEVENV_OWNER", OWNER)
    home = Path(applied["DEVENV_HOME"])
    (home / "profiles" / "envs").mkdir(parents=True, exist_ok=True)
    short = request.node.name.replace("test_", "")[:8].replace("_", "-").strip("-")
    environ = {k: v for k, v in os.environ.items()}
    environ.update(applied, DEVENV_OWNER=OWNER, PYTHONUNBUFFERED="1")
    environ.pop("SSH_AUTH_SOCK", None)
    slurm = slurm_clusters.cluster_of(request.node) or slurm_clusters.CLUSTER1
    c = Cluster(home, environ, cluster_python, f"s{short}-{secrets.token_hex(2)}", slurm)
    c.write_profile()
    # the probe jobs (`check`, `sanity`) are named alike for everyone: only those submitted during this test are its
    before = {j[0] for j in squeue("--name=devenv-check,devenv-sanity")}
    yield c
    left = live_jobs(c.job_name) + [j for name in ("devenv-check", "devenv-sanity") for j in live_jobs(name)
                                     if j[0] not in before]
    for job in left:
        subprocess.run(["scancel", job[0]], timeout=30)
    shutil.rmtree(os.path.expanduser(f"~/.devenv/envs/{OWNER}-{c.env}"), ignore_errors=True)
    shutil.rmtree(os.path.expanduser(f"~/devenv-workspaces/{c.env}"), ignore_errors=True)
    assert not left, f"jobs left behind (now cancelled): {left}"


def slurm_dir() -> Path:
    """The running test's cluster's pid files and logs."""
    return slurm_clusters.current().state_dir


def restart_slurmctld() -> None:
    """As testhost/setup starts it (its conf: the test's SLURM_CONF), then wait for both nodes to answer again."""
    if subprocess.run(["sinfo", "-h"], capture_output=True, timeout=30).returncode != 0:
        subprocess.run(["slurmctld"], check=True, timeout=60, close_fds=True)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        states = subprocess.run(["sinfo", "-h", "-N", "-o", "%t"], capture_output=True, text=True,
                                timeout=30).stdout.split()
        if len(states) == 2 and all(s in ("idle", "mix", "alloc") for s in states):
            return
        time.sleep(1)
    raise AssertionError("the Slurm nodes did not answer again after slurmctld restarted")
