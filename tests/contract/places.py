"""Where the behaviour suite runs: one Place per backend, each with one environment the cases share.

A Place runs devenv as the user runs it (`python3 -m devenv ...` in a subprocess; the in-memory backend through
tests/contract/memory_devenv.py, which adds it to the registry) and says what is left of its environment on the
host and on this machine (`leftovers`), in the backend's own words: containers, networks and volumes for docker,
jobs for Slurm, the state folder and workspace for the bare host and Slurm; the laptop's state file and ssh entry
for all.
"""

from __future__ import annotations

import json
import os
import pickle
import queue
import re
import secrets
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from slurm_clusters import contract_cluster

REPO = Path(__file__).resolve().parents[2]
OWNER = "t"
MEMORY_DEVENV = Path(__file__).resolve().parent / "memory_devenv.py"


@dataclass(frozen=True)
class Wait:
    """A wait of `up` the suite interrupts: its name, the progress line that says `up` is in it, and what the
    place arranges first (a full cluster, a closed gate) and undoes after."""

    name: str
    line: str              # a regular expression matched against `up`'s output lines


_DEFAULT_SIGNALS = ("import os, signal, sys\n"
                    "for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP): signal.signal(s, signal.SIG_DFL)\n"
                    "os.execv(sys.argv[1], sys.argv[1:])")


class Running:
    """A devenv process whose output lines (stdout and stderr) are read as they come, by a thread."""

    def __init__(self, argv: list[str], environ: dict[str, str], stdin_data: bytes | None = None):
        # Ctrl-C, SIGTERM and SIGHUP reach devenv as they reach a command in a terminal: a shell without job
        # control starts its background jobs with SIGINT ignored (scripts/test runs one part of the suite so),
        # nohup starts its command with SIGHUP ignored, and an ignored signal stays ignored across exec (devenv
        # leaves an ignored one alone, as it should under nohup), so the child sets all three back to the default
        # before it becomes devenv. Under `nohup scripts/test --quick` the SIGHUP cases waited out their 120 s.
        # The launcher imports only os, signal and sys: -S spares it site's work (~30 ms CPU) before devenv starts.
        launch = [sys.executable, "-S", "-c", _DEFAULT_SIGNALS, *argv]
        self.proc = subprocess.Popen(launch, stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=environ, cwd=REPO)
        if stdin_data is not None:
            self.proc.stdin.write(stdin_data)   # type: ignore[union-attr]
            self.proc.stdin.close()             # type: ignore[union-attr]
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for raw in iter(self.proc.stdout.readline, b""):  # type: ignore[union-attr]
            line = raw.decode(errors="replace").rstrip("\n")
            self.lines.append(line)
            self._queue.put(line)
        self._queue.put(None)

    def wait_line(self, pattern: str, timeout: float) -> re.Match[str]:
        """The first line (from now) matching pattern; fails when the process ends or the time is up first."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            try:
                line = self._queue.get(timeout=max(remaining, 0.01))
            except queue.Empty:
                self.proc.kill()
                raise AssertionError(f"no line matching {pattern!r} within {timeout:.0f} s:\n" + self.output) from None
            if line is None:
                self._queue.put(None)
                raise AssertionError(f"devenv ended (exit {self.proc.wait()}) before a line matching {pattern!r}:\n"
                                     + self.output)
            found = re.search(pattern, line)
            if found:
                return found

    def finish(self, timeout: float = 120) -> int:
        """Its exit code, once it ended and its output is read."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"devenv did not end within {timeout:.0f} s:\n{self.output}") from None
        self._reader.join(30)
        return code

    @property
    def output(self) -> str:
        return "\n".join(self.lines)


@dataclass
class Place:
    """One backend on its host, with the suite's environment `env` (a name of its own) and a DEVENV_HOME."""

    kind: str
    host: str
    env: str
    home: Path
    environ: dict[str, str]
    argv0: list[str] = field(default_factory=lambda: [sys.executable, "-m", "devenv"])
    waits: tuple[Wait, ...] = ()
    timings: list[tuple[str, float]] = field(default_factory=list)
    login_port: int | None = None   # the test sshd's port its connections go to (None: the test host's own)

    # --- running devenv ----------------------------------------------------------------------------------

    def devenv(self, *args: str, timeout: float = 300, stdin: str | None = None,
               extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        started = time.monotonic()
        done = subprocess.run([*self.argv0, *args], capture_output=True, text=True, timeout=timeout,
                              env={**self.environ, **(extra_env or {})}, cwd=REPO, input=stdin,
                              stdin=subprocess.DEVNULL if stdin is None else None)
        took = time.monotonic() - started
        self.timings.append((" ".join(args), took))
        print(f"[{self.kind} {took:6.2f}s] devenv {' '.join(args)} -> {done.returncode}")
        return done

    def ok(self, *args: str, timeout: float = 300, **kwargs) -> subprocess.CompletedProcess[str]:
        done = self.devenv(*args, timeout=timeout, **kwargs)
        assert done.returncode == 0, f"devenv {' '.join(args)} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
        assert "Traceback" not in done.stderr, done.stderr
        return done

    def start(self, *args: str, extra_env: dict[str, str] | None = None, stdin: bytes | None = None) -> Running:
        return Running([*self.argv0, *args], {**self.environ, **(extra_env or {})}, stdin)

    def up(self, *flags: str, **kwargs) -> dict:
        """`up --detach --json`: its JSON."""
        return json.loads(self.ok("up", self.host, "--detach", "--json", *flags, **kwargs).stdout)

    def rows(self) -> list[dict]:
        """`status HOST --json`: the rows of this environment (this owner's)."""
        listed = json.loads(self.ok("status", self.host, "--json").stdout)
        return [e for e in listed["environments"] if e["env"] == self.env and e.get("owner", OWNER) == OWNER]

    # --- what the place arranges -------------------------------------------------------------------------

    def change_spec(self, step: int) -> None:
        """Make the profile ask for something else than the environment runs (step: 1, 2, ... each different)."""
        raise NotImplementedError

    def arrange(self, wait: Wait) -> dict[str, str]:
        """Before an `up` that is to be interrupted at wait: what it needs (extra environment variables)."""
        return {}

    def release(self, wait: Wait) -> dict[str, str]:
        """After it: let the next `up` through (extra environment variables for it)."""
        return {}

    # --- what is left ------------------------------------------------------------------------------------

    def on_host(self) -> list[str]:
        """What the backend keeps of the environment on its host (containers, networks, volumes, jobs, files)."""
        raise NotImplementedError

    def live(self) -> list[str]:
        """The environment's running things (containers or live jobs): one after a good `up`."""
        raise NotImplementedError

    def leftovers(self) -> list[str]:
        """Everything of the environment, host and laptop: empty after `down --purge`."""
        left = list(self.on_host())
        state = self.home / "state" / "envs" / re.sub(r"[^A-Za-z0-9._-]", "_", self.host) / f"{self.env}.json"
        if state.exists():
            left.append(f"laptop state file {state}")
        config = self.home / "ssh" / "config"
        from devenv.remote import openssh

        alias = openssh.env_alias(self.host, self.env)
        if config.is_file() and re.search(rf"^Host {re.escape(alias)}\b", config.read_text(), re.M):
            left.append(f"ssh entry {alias}")
        return left

    def remove_everything(self) -> None:
        self.devenv("down", self.host, "--purge", "--yes")


def base_environ(home: Path, extra: dict[str, str]) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("DEVENV_") and k != "SSH_AUTH_SOCK"}
    environ.update(extra)
    environ.update({"DEVENV_HOME": str(home), "DEVENV_OWNER": OWNER, "PYTHONUNBUFFERED": "1",
                    "PYTHONPATH": str(REPO)})
    return environ


# --- the in-memory backend ----------------------------------------------------------------------------------

class MemoryPlace(Place):
    """The docker backend's steps over the memory engine (tests/contract/memory_backend.py), on this machine."""

    def write_profile(self, image: str = "devenv/memory:1", build: bool = False, shm: str = "1g") -> None:
        build_lines = "build:\n  dockerfile: pytorch.Dockerfile\n" if build else ""
        (self.home / "profiles" / "envs" / f"{self.env}.yaml").write_text(
            f"description: the contract suite's environment\nimage: {image}\n{build_lines}"
            f"ports:\n  jupyter: 8888\n  ssh: 2222\nshm_size: {shm}\ngpus: none\n")

    def change_spec(self, step: int) -> None:
        self.write_profile(shm=f"{step + 1}g")

    def arrange(self, wait: Wait) -> dict[str, str]:
        self.gate = self.home / f"gate-{time.monotonic_ns()}"
        if wait.name == "building":   # an image of its own, which `up` must build
            self.write_profile(image=f"devenv/memory-built:{self.gate.name}", build=True)
        return {"DEVENV_MEMORY_GATE": str(self.gate)}

    def release(self, wait: Wait) -> dict[str, str]:
        self.gate.touch()
        return {"DEVENV_MEMORY_GATE": str(self.gate)}

    def _engine(self):
        path = self.home / "memory-engine" / "engine.pickle"
        return pickle.loads(path.read_bytes()) if path.exists() else None

    def live(self) -> list[str]:
        engine = self._engine()
        return [] if engine is None else [f"container {c.name} ({c.state})" for c in engine.containers.values()
                                          if c.labels.get("org.devenv.env") == self.env]

    def on_host(self) -> list[str]:
        engine = self._engine()
        if engine is None:
            return []
        mine = lambda labels: labels.get("org.devenv.env") == self.env  # noqa: E731
        return (self.live() + [f"network {n}" for n, labels in engine.networks.items() if mine(labels)]
                + [f"volume {n}" for n, labels in engine.volumes.items() if mine(labels)])


def memory_place(home: Path) -> MemoryPlace:
    for sub in ("hosts", "envs"):
        (home / "profiles" / sub).mkdir(parents=True, exist_ok=True)
    environ = base_environ(home, {"DEVENV_SSH_CONFIG": str(home / "ssh_config_user"),
                                  "DEVENV_KNOWN_HOSTS": str(home / "known_hosts_user")})
    environ["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "tests")])
    env = f"cmem{secrets.token_hex(2)}"   # the lock on this machine is per owner and name: one per worker
    place = MemoryPlace("memory", "memhost", env, home, environ, argv0=[sys.executable, str(MEMORY_DEVENV)],
                        waits=(Wait("building", r"==> Building "), Wait("waiting for jupyter", r"==> Waiting for ")))
    (home / "profiles" / "hosts" / "memhost.yaml").write_text(
        f"description: the memory engine (tests/contract)\nlocal: true\nruntime: docker\ndefault_env: {env}\n")
    place.write_profile()
    return place


# --- the real test host -------------------------------------------------------------------------------------

def docker_cli(*args: str) -> list[str]:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=120)
    return done.stdout.split()


class DockerPlace(Place):
    image: str = "devenv/pytorch:2.13.0-cpu"

    def write_profile(self, shm: str = "2g") -> None:
        cpu = yaml.safe_load((self.home / "profiles" / "envs" / "cpu.yaml").read_text())
        cpu.update({"ports": self.ports, "shm_size": shm})
        (self.home / "profiles" / "envs" / f"{self.env}.yaml").write_text(yaml.safe_dump(cpu))

    def change_spec(self, step: int) -> None:
        self.write_profile(shm=f"{step}g")

    def live(self) -> list[str]:
        return [f"container {n}" for n in docker_cli("ps", "-a", "--filter", f"label=org.devenv.env={self.env}",
                                                     "--format", "{{.Names}}/{{.State}}")]

    def on_host(self) -> list[str]:
        label = f"label=org.devenv.env={self.env}"
        return (self.live() + [f"network {n}" for n in docker_cli("network", "ls", "-q", "--filter", label)]
                + [f"volume {n}" for n in docker_cli("volume", "ls", "-q", "--filter", label)])

    def remove_everything(self) -> None:
        super().remove_everything()
        label = f"label=org.devenv.env={self.env}"
        for name in docker_cli("ps", "-aq", "--filter", label):
            docker_cli("rm", "-f", name)
        for name in docker_cli("network", "ls", "-q", "--filter", label):
            docker_cli("network", "rm", name)
        for name in docker_cli("volume", "ls", "-q", "--filter", label):
            docker_cli("volume", "rm", "-f", name)


def host_files(env: str) -> list[str]:
    """The bare host's and Slurm's files of the environment (the test host's root home is the host's)."""
    left = []
    for path in (Path(f"~/.devenv/envs/{OWNER}-{env}").expanduser(), Path(f"~/devenv-workspaces/{env}").expanduser()):
        if path.exists():
            left.append(f"{path}")
    return left


class HostPlace(Place):
    def write_profile(self, port: int) -> None:
        (self.home / "profiles" / "envs" / f"{self.env}.yaml").write_text(
            f"description: the contract suite's environment\nimage: unused-on-host\nports:\n  jupyter: {port}\n"
            f"gpus: none\n")

    def change_spec(self, step: int) -> None:
        from sshd_fixture import free_port

        self.write_profile(free_port())

    def _pids(self) -> list[str]:
        marker = f"{OWNER}-{self.env}/jupyter_server_config.py"
        found = []
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                if marker in cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                    found.append(f"jupyter pid {cmdline.parent.name}")
            except OSError:
                continue
        return found

    def live(self) -> list[str]:
        return self._pids()

    def on_host(self) -> list[str]:
        return self._pids() + host_files(self.env)

    def remove_everything(self) -> None:
        super().remove_everything()
        for path in host_files(self.env):
            shutil.rmtree(path, ignore_errors=True)


def squeue(name: str) -> list[list[str]]:
    out = subprocess.run(["squeue", "--noheader", "--states=all", "--format=%i|%j|%T|%r", f"--name={name}"],
                         capture_output=True, text=True, timeout=30, env=slurm_environ()).stdout
    return [line.split("|") for line in out.splitlines() if line.strip()]


LIVE_JOB_STATES = ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING")


def slurm_environ() -> dict[str, str]:
    """This process's environment with the Slurm place's cluster's SLURM_CONF: the place is module-scoped, made and
    removed outside any one test's environment (tests/slurm_clusters.py)."""
    return {**os.environ, **contract_cluster().env}


class SlurmPlace(Place):
    python: str = ""
    time_limit: str = "00:10:00"

    def write_profile(self, extra_sbatch: str = "") -> None:
        (self.home / "profiles" / "hosts" / f"{self.host}.yaml").write_text(textwrap.dedent(f"""\
            description: the test host's Slurm cluster (login node = the test sshd)
            ssh:
              alias: {contract_cluster().alias}
            runtime: slurm
            python: {self.python}
            default_env: {self.env}
            slurm:
              partition: debug
              time: "{self.time_limit}"
            """) + (f"  extra_sbatch: [{extra_sbatch}]\n" if extra_sbatch else ""))
        (self.home / "profiles" / "envs" / f"{self.env}.yaml").write_text(
            "description: the contract suite's environment\nimage: unused-on-slurm\nports:\n  jupyter: 8888\n"
            "gpus: none\n")

    def change_spec(self, step: int) -> None:
        self.time_limit = f"00:{10 - step:02d}:00"
        self.write_profile()

    def live(self) -> list[str]:
        return [f"job {j[0]} ({j[2]})" for j in squeue(f"devenv-{OWNER}-{self.env}") if j[2] in LIVE_JOB_STATES]

    def on_host(self) -> list[str]:
        return self.live() + host_files(self.env)

    def arrange(self, wait: Wait) -> dict[str, str]:
        if wait.name == "queued":   # a job that may start only in an hour: it stays PENDING (BeginTime)
            self.write_profile(extra_sbatch="--begin=now+3600")
        return {}

    def release(self, wait: Wait) -> dict[str, str]:
        self.write_profile()
        return {}

    def remove_everything(self) -> None:
        self.release(Wait("", ""))
        super().remove_everything()
        for job in squeue(f"devenv-{OWNER}-{self.env}"):
            if job[2] in LIVE_JOB_STATES:
                subprocess.run(["scancel", job[0]], timeout=60, env=slurm_environ())
        for path in host_files(self.env):
            shutil.rmtree(path, ignore_errors=True)


def cluster_python(testhost_home: Path) -> str:
    """The python testhost/setup made for the cluster (JupyterLab, torch): the `python:` of its testcluster."""
    profile = testhost_home / "profiles" / "hosts" / "testcluster.yaml"
    python = (yaml.safe_load(profile.read_text()) or {}).get("python") if profile.is_file() else None
    if not python or not Path(python).is_file():
        raise AssertionError(f"no cluster python in {profile}: run testhost/setup again")
    return str(python)
