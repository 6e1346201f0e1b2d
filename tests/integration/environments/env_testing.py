"""Fixtures for environment tests against the real test host (sshd on 127.0.0.1 + the local dockerd).

Every test gets its own environment name (so its own container and volume), free preferred ports, a private
DEVENV_HOME copied from the test host's, and a finalizer that removes whatever the test left on the host.
devenv runs as the user runs it: `python -m devenv ...` in a subprocess.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from sshd_fixture import free_port

from devenv.env import spec as envspec
from testhost import (  # noqa: F401  (fixtures, used by name)
    apply_testhost_env,
    jupyterlab_venv,
    made_cluster_python,
    testhost,
    testhost_env,
)

REPO = Path(__file__).resolve().parents[3]
SLIM_IMAGE = "devenv-test/pytorch:slim"
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"   # the test machine's bundle (its proxy's CA included)
OWNER = "t"


def slim_profile(image: str = SLIM_IMAGE, **fields) -> str:
    """An environment on the Debian test base without torch (a Jupyter kernel needs none; see the report)."""
    ports = fields.pop("ports", {"jupyter": 8888, "ssh": 2222})
    extra = "".join(f"{k}: {json.dumps(v)}\n" for k, v in fields.items())
    return textwrap.dedent(f"""\
        description: test environment (Debian base, JupyterLab, sshd, no torch)
        image: {image}
        build:
          dockerfile: pytorch.Dockerfile
          args:
            BASE_IMAGE: devenv-base:bookworm
            TORCH_INDEX: cpu
            TORCH_VERSION: ""
        image_size_gb: 1
        ports:
          jupyter: {ports['jupyter']}
          ssh: {ports['ssh']}
        volumes:
          workspace: /workspace
        shm_size: 1g
        gpus: none
        """) + extra


def docker(*args: str, check: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check, timeout=120)


@dataclass
class EnvUnderTest:
    name: str
    home: Path
    environ: dict[str, str]

    @property
    def container(self) -> str:
        return envspec.container_name(OWNER, self.name)

    @property
    def volume(self) -> str:
        return envspec.volume_name(OWNER, self.name, "workspace")

    def write_profile(self, **fields) -> Path:
        path = self.home / "profiles" / "envs" / f"{self.name}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(slim_profile(**fields))
        return path

    def run(self, *args: str, timeout: float = 300, check: bool = True, stdin: str | None = None,
            extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "devenv", *args], capture_output=True, text=True,
                              timeout=timeout, env={**self.environ, **(extra_env or {})}, cwd=REPO,
                              input=stdin if stdin is not None else "")
        print(f"[{time.monotonic() - started:6.2f}s] devenv {' '.join(args)} -> {done.returncode}")
        if check and done.returncode != 0:
            raise AssertionError(f"devenv {' '.join(args)} exited {done.returncode}\n"
                                 f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}")
        return done

    def popen(self, *args: str, stdin: int | None = None, new_session: bool = False) -> subprocess.Popen:
        """devenv running; new_session: in a process group (and session) of its own, as a terminal's job is."""
        return subprocess.Popen([sys.executable, "-m", "devenv", *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=self.environ, cwd=REPO, stdin=stdin,
                                start_new_session=new_session)

    def containers(self) -> list[str]:
        out = docker("ps", "-a", "--filter", f"label=org.devenv.env={self.name}", "--format", "{{.Names}}").stdout
        return out.split()

    def volumes(self) -> list[str]:
        out = docker("volume", "ls", "-q", "--filter", f"label=org.devenv.env={self.name}").stdout
        return out.split()

    def state(self) -> str:
        return docker("inspect", "-f", "{{.State.Status}}", self.container).stdout.strip()

    def networks(self) -> list[str]:
        out = docker("network", "ls", "--filter", f"label=org.devenv.env={self.name}",
                     "--format", "{{.Name}}").stdout
        return out.split()

    def remove_everything(self) -> None:
        for name in self.containers():
            docker("rm", "-f", name)
        for volume in self.volumes():
            docker("volume", "rm", "-f", volume)
        for network in self.networks():
            docker("network", "rm", network)


def base_environ(testhost_vars: dict[str, str], home: Path) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("DEVENV_")}
    environ.update(testhost_vars)
    environ.update({"DEVENV_HOME": str(home), "DEVENV_OWNER": OWNER, "DEVENV_BUILD_CA_BUNDLE": CA_BUNDLE,
                    "PYTHONUNBUFFERED": "1"})
    environ.pop("SSH_AUTH_SOCK", None)
    return environ


@contextmanager
def one_build_at_a_time(name: str) -> Iterator[None]:
    """Held while a pytest process (an xdist worker) builds a shared test image: the first builds it, the others
    wait and then find every layer cached, instead of all building it at once from scratch (on a fresh machine:
    the same pip installs N times over, on 2 cores)."""
    with open(Path(tempfile.gettempdir()) / f"devenv-tests-{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def slim_image(testhost, tmp_path_factory) -> str:
    """The test image, built on the test host with `devenv image build` (cached layers make reruns quick)."""
    home = tmp_path_factory.mktemp("image-home")
    shutil.copytree(testhost.env["DEVENV_HOME"], home, dirs_exist_ok=True)
    env = EnvUnderTest("slim-image", home, base_environ(testhost.env, home))
    env.write_profile()
    with one_build_at_a_time("slim-image"):
        env.run("image", "build", "testbox", "--env", "slim-image", "-q", timeout=900)
    assert docker("image", "inspect", SLIM_IMAGE).returncode == 0
    return SLIM_IMAGE


@pytest.fixture
def test_env(testhost, slim_image, monkeypatch, tmp_path, request) -> EnvUnderTest:
    """A fresh environment name with free preferred ports, on the test host; removed afterwards."""
    applied = apply_testhost_env(monkeypatch, testhost.env, tmp_path)
    home = Path(applied["DEVENV_HOME"])
    short = request.node.name.replace("test_", "")[:10].replace("_", "-").strip("-")
    env = EnvUnderTest(f"{short}-{secrets.token_hex(2)}", home, base_environ(applied, home))
    env.write_profile(ports={"jupyter": free_port(), "ssh": free_port()})
    yield env
    env.remove_everything()


def read_url(proc: subprocess.Popen, timeout: float = 60) -> str:
    """The first stdout line of `devenv jupyter` (the URL), or fail with its stderr."""
    start = time.monotonic()
    line = proc.stdout.readline().strip()
    if not line.startswith("http://127.0.0.1:"):
        proc.kill()
        raise AssertionError(f"no URL after {time.monotonic() - start:.1f}s: {line!r}\n{proc.stderr.read()}")
    return line


def held_masters() -> list[int]:
    """The pids of the OpenSSH ControlMasters devenv's tunnels hold (their -S socket under the control dir)."""
    from devenv.remote.tunnels import control_dir_path

    control = str(control_dir_path()).encode()
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if b"-M" in argv and any(arg.startswith(control) for arg in argv):
            found.append(int(cmdline.parent.name))
    return found


def processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that contain text (stray tunnels, stray devenv)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in argv:
            found.append(argv)
    return found


# --- podman beside Docker: the slim image built on podman, shared by test_env_podman and test_env_gpu_choice --
def podman(*args: str, check: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], capture_output=True, text=True, check=check, timeout=120)


def docker_names() -> list[str]:
    return subprocess.run(["docker", "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True,
                          timeout=60).stdout.split()


class PodmanEnv(EnvUnderTest):
    def containers(self) -> list[str]:
        return podman("ps", "-a", "--filter", f"label=org.devenv.env={self.name}",
                      "--format", "{{.Names}}").stdout.split()

    def volumes(self) -> list[str]:
        return podman("volume", "ls", "-q", "--filter", f"label=org.devenv.env={self.name}").stdout.split()

    def networks(self) -> list[str]:
        return podman("network", "ls", "-q", "--filter", f"label=org.devenv.env={self.name}").stdout.split()

    def remove_everything(self) -> None:
        for name in self.containers():
            podman("rm", "-f", name)
        for volume in self.volumes():
            podman("volume", "rm", "-f", volume)
        for network in self.networks():
            podman("network", "rm", "-f", network)


@pytest.fixture(scope="session")
def podman_slim_image(testhost, tmp_path_factory) -> str:
    """The slim test image built on podman by `devenv image build` (buildah behind podman's Docker API)."""
    if shutil.which("podman") is None:
        pytest.fail("podman is not installed: testhost/setup installs it (run it again)")
    home = tmp_path_factory.mktemp("podman-image-home")
    shutil.copytree(testhost.env["DEVENV_HOME"], home, dirs_exist_ok=True)
    env = PodmanEnv("slim-image", home, base_environ(testhost.env, home))
    env.write_profile()
    with one_build_at_a_time("podman-slim-image"):
        env.run("image", "build", "testbox-podman", "--env", "slim-image", "-q", timeout=900)
    assert podman("image", "exists", "devenv-test/pytorch:slim").returncode == 0
    return "devenv-test/pytorch:slim"


@pytest.fixture(scope="session")
def host_python(tmp_path_factory) -> str:
    """A python on the test host with JupyterLab and torch: the one testhost/setup made for the cluster, else a venv
    made here (through system site packages, the machine's torch)."""
    return made_cluster_python() or jupyterlab_venv(tmp_path_factory.mktemp("host-runtime"))


# --- a GPU host of two replayed H200s on an sshd of our own, GPU 0 held by a real `sleep` (someone else's job) --
REPLAY_UUID0 = "GPU-35c64b04-2d7b-9f48-2883-3f9d4b9d7f59"


@dataclass
class ReplayGpuHost:
    home: Path                  # the laptop's DEVENV_HOME: profiles/hosts/<name>.yaml is written, envs/ is empty
    other_pid: int              # the process nvidia-smi lists on GPU 0
    environ: dict[str, str]

    def devenv(self, *args: str) -> subprocess.CompletedProcess:
        done = subprocess.run([sys.executable, "-m", "devenv", *args], capture_output=True, text=True,
                              timeout=300, env=self.environ, cwd=REPO, input="")
        assert "Traceback" not in done.stderr, done.stderr
        return done


@contextmanager
def replay_gpu_host(tmp_path: Path, name: str, profile_tail: str,
                    tick_file: Path | None = None) -> Iterator[ReplayGpuHost]:
    """The host profile `name` (ssh to the replay sshd, then profile_tail) in a fresh DEVENV_HOME; nvidia-smi is
    tests/replay's H200 recording held at a tick where GPU 0 is under load and GPU 1 idle (tick 30), or, with
    tick_file, at the tick that file holds when nvidia-smi runs (30 while it is empty): a test moves it."""
    from monitor_helpers import replay_sshd
    from sshd_fixture import make_key

    other = subprocess.Popen(["sleep", "600"])
    try:
        apps = tmp_path / "apps.csv"
        apps.write_text(f"{other.pid}, python3, 1130, {REPLAY_UUID0}\n")
        key = make_key(tmp_path / "id_ed25519")
        home = tmp_path / "home"
        (home / "profiles" / "hosts").mkdir(parents=True)
        (home / "profiles" / "envs").mkdir(parents=True)
        environ = {k: v for k, v in os.environ.items() if not k.startswith("DEVENV_") and k != "SSH_AUTH_SOCK"}
        environ.update({"DEVENV_HOME": str(home), "DEVENV_KNOWN_HOSTS": str(home / "known_hosts"),
                        "DEVENV_SSH_CONFIG": str(home / "ssh_config"), "DEVENV_OWNER": "t",
                        "PYTHONUNBUFFERED": "1"})
        replay = {"REPLAY_GPUS": "2", "REPLAY_TICK": "30", "REPLAY_APPS": str(apps)}
        if tick_file is not None:
            replay["REPLAY_TICK_FILE"] = str(tick_file)
        server = replay_sshd(tmp_path / "sshd", key, env=replay)
        with server:
            (home / "known_hosts").write_text(server.known_hosts_line())
            (home / "profiles" / "hosts" / f"{name}.yaml").write_text(
                f"ssh:\n  hostname: 127.0.0.1\n  port: {server.port}\n  user: root\n  identity_file: {key.path}\n"
                f"  connect_timeout: 5\n{profile_tail}")
            yield ReplayGpuHost(home, other.pid, environ)
    finally:
        other.kill()
        other.wait()


# --- the GPUs of that replayed host reaching a podman container: a CDI spec of our own stands in for nvidia-ctk's
# (no GPU here, and the test host's dockerd 20.10 knows no CDI); each device marks the container's environment
REPLAY_CDI = """\
cdiVersion: "0.3.0"
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    env: ["DEVENV_CDI_PROOF={token}-gpu0"]
    deviceNodes: [{{path: /dev/zero}}]
- name: "1"
  containerEdits:
    env: ["DEVENV_CDI_PROOF={token}-gpu1"]
    deviceNodes: [{{path: /dev/zero}}]
- name: all
  containerEdits:
    env: ["DEVENV_CDI_PROOF={token}-all"]
    deviceNodes: [{{path: /dev/zero}}]
"""


@contextmanager
def replay_cdi_spec(token: str) -> Iterator[Path]:
    """/etc/cdi/devenv-test-TOKEN.yaml (REPLAY_CDI) while the block runs."""
    cdi = Path("/etc/cdi") / f"devenv-test-{token}.yaml"
    cdi.parent.mkdir(exist_ok=True)
    cdi.write_text(REPLAY_CDI.format(token=token))
    try:
        yield cdi
    finally:
        cdi.unlink(missing_ok=True)


def podman_env_leftovers(env: str) -> None:
    """Remove the podman containers and volumes labelled with the environment `env`."""
    for c in podman("ps", "-a", "--filter", f"label=org.devenv.env={env}", "--format", "{{.Names}}").stdout.split():
        podman("rm", "-f", c)
    for v in podman("volume", "ls", "-q", "--filter", f"label=org.devenv.env={env}").stdout.split():
        podman("volume", "rm", "-f", v)
