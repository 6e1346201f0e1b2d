"""Fixtures for tests against the real test host that `testhost/setup` builds on this machine: a dedicated
sshd on 127.0.0.1 (aliases `testbox` as root, `testbox-nodocker` as a user outside the docker group), the
local dockerd, and the base image devenv-base:bookworm. A helper module to import, not a conftest:

    from testhost import testhost, testhost_env, use_testhost  # noqa: F401  (tests/ is on sys.path)

    def test_x(use_testhost):          # DEVENV_HOME, DEVENV_SSH_CONFIG, DEVENV_KNOWN_HOSTS now point at it
        load_host("testbox")

A missing test host is a failure, never a skip: integration tests must run in CI (scripts/test sets it up).
"""

from __future__ import annotations

import os
import shlex
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BASE_IMAGE = "devenv-base:bookworm"
ENV_VARS = ("DEVENV_HOME", "DEVENV_SSH_CONFIG", "DEVENV_KNOWN_HOSTS")
SETUP_HINT = "run `testhost/setup` as root first (scripts/test does it for you)"


def testhost_dir() -> Path:
    """Where testhost/setup keeps its state: $DEVENV_TESTHOST_DIR, else <repo>/.testhost."""
    return Path(os.environ.get("DEVENV_TESTHOST_DIR") or REPO / ".testhost")


def read_env_file(path: Path) -> dict[str, str]:
    """The `export KEY=VALUE` lines of the env file testhost/setup writes, as a dict."""
    env: dict[str, str] = {}
    for line in path.read_text().splitlines():
        words = shlex.split(line, comments=True)
        if words[:1] == ["export"]:
            words = words[1:]
        for word in words:
            key, sep, value = word.partition("=")
            if sep:
                env[key] = value
    return env


@dataclass(frozen=True)
class HostUnderTest:
    """The files and names of the running test host (paths are absolute)."""

    dir: Path
    env: dict[str, str]
    port: int
    alias: str = "testbox"
    nodocker_alias: str = "testbox-nodocker"
    nodocker_user: str = "devenv-nodocker"
    base_image: str = BASE_IMAGE

    @property
    def ssh_config(self) -> Path:
        return Path(self.env["DEVENV_SSH_CONFIG"])

    @property
    def known_hosts(self) -> Path:
        return Path(self.env["DEVENV_KNOWN_HOSTS"])

    @property
    def identity_file(self) -> Path:
        return self.dir / "id_ed25519"

    def ssh_argv(self, alias: str | None = None, known_hosts: Path | None = None) -> list[str]:
        """OpenSSH with the pinned host key and strict checking; append the remote command."""
        return ["ssh", "-F", str(self.ssh_config),
                "-o", f"UserKnownHostsFile={known_hosts or self.known_hosts}",
                "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
                alias or self.alias]

    def sshd_log(self) -> str:
        return (self.dir / "sshd.log").read_text(errors="replace")


@pytest.fixture(scope="session")
def testhost_env() -> dict[str, str]:
    """DEVENV_HOME, DEVENV_SSH_CONFIG, DEVENV_KNOWN_HOSTS of the test host, read from <dir>/env."""
    env_file = testhost_dir() / "env"
    if not env_file.is_file():
        pytest.fail(f"no test host: {env_file} is missing; {SETUP_HINT}", pytrace=False)
    env = read_env_file(env_file)
    missing = [name for name in ENV_VARS if name not in env]
    if missing:
        pytest.fail(f"{env_file} lacks {', '.join(missing)}; {SETUP_HINT}", pytrace=False)
    gone = [env[name] for name in ENV_VARS if not Path(env[name]).exists()]
    if gone:
        pytest.fail(f"{env_file} names missing files: {', '.join(gone)}; {SETUP_HINT}", pytrace=False)
    return env


@pytest.fixture(scope="session")
def testhost(testhost_env) -> HostUnderTest:
    """The running test host; fails (not skips) when its sshd does not answer."""
    directory = testhost_dir()
    first = (directory / "known_hosts").read_text().split()[0]  # "[127.0.0.1]:2201"
    port = int(first.rsplit(":", 1)[1])
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        problem = None
    except OSError as exc:
        problem = str(exc)
    if problem:  # failed outside the except block, so the report is one line, not a chained exception
        pytest.fail(f"the test host's sshd does not answer on 127.0.0.1:{port} ({problem}); {SETUP_HINT}",
                    pytrace=False)
    return HostUnderTest(dir=directory, env=dict(testhost_env), port=port)


def apply_testhost_env(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """Point devenv at the test host for one test. DEVENV_HOME and known_hosts are copied into tmp_path,
    so a test may write state or change host keys without touching the next test; ssh_config is shared
    (it names the client key by absolute path and nobody writes it)."""
    home = tmp_path / "testhost-home"
    shutil.copytree(env["DEVENV_HOME"], home)
    known_hosts = tmp_path / "testhost-known_hosts"
    shutil.copy2(env["DEVENV_KNOWN_HOSTS"], known_hosts)
    applied = {**env, "DEVENV_HOME": str(home), "DEVENV_KNOWN_HOSTS": str(known_hosts)}
    for name, value in applied.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)  # the agent's keys must not stand in for ours
    return applied


@pytest.fixture
def use_testhost(testhost, monkeypatch, tmp_path) -> dict[str, str]:
    """Set DEVENV_HOME, DEVENV_SSH_CONFIG, DEVENV_KNOWN_HOSTS to (private copies of) the test host's."""
    return apply_testhost_env(monkeypatch, testhost.env, tmp_path)


def made_cluster_python() -> str | None:
    """The python testhost/setup made once per machine (the `python:` of its testcluster profile: JupyterLab and
    the CPU torch), when it is there and has both; a fixture that needs such a python takes it instead of making a
    venv of its own (a pip install of JupyterLab: a minute on a fresh machine, once per pytest process)."""
    import subprocess

    import yaml

    profile = testhost_dir() / "home" / "profiles" / "hosts" / "testcluster.yaml"
    if not profile.is_file():
        return None
    python = (yaml.safe_load(profile.read_text()) or {}).get("python")
    if not python or not Path(python).is_absolute():
        return None
    probe = subprocess.run([python, "-c", "import importlib.util as u, sys; "
                            "sys.exit(not (u.find_spec('jupyterlab') and u.find_spec('torch')))"],
                           capture_output=True, timeout=60)
    return python if probe.returncode == 0 else None


def jupyterlab_venv(folder: Path) -> str:
    """A venv in folder with JupyterLab (and, through system site packages, the machine's torch); its python."""
    import subprocess
    import sys

    venv = folder / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=120)
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "jupyterlab>=4,<5"], capture_output=True,
                         text=True, timeout=600)
    assert pip.returncode == 0, pip.stderr
    return str(venv / "bin" / "python")
