"""The in-memory backend: devenv's docker backend (the real Provisioner: its decisions, specs, labels, waits)
over tests/memory_runtime.py's engine instead of a Docker daemon. It joins the registry with one line
(`registry.register("docker", MemoryBackend)`) in the process that runs devenv (tests/contract/memory_devenv.py).

The engine's state is kept in a file under $DEVENV_HOME, read and written around each call under a lock, so
that several `devenv` processes (two `up` at once) see one engine, as they would see one Docker daemon.
`exec` runs the command on this machine, in a folder of the container's own, streaming its output as a
container's would; with stdin (exec_entry), this machine's shell runs it there. Waits the suite interrupts
are gates: a build, or the services' readiness, that goes on only once the file $DEVENV_MEMORY_GATE exists.
"""

from __future__ import annotations

import fcntl
import os
import pickle
import selectors
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from memory_runtime import MemoryRuntime

from devenv.checks.report import PASS, CheckReport, CheckResult
from devenv.config.profiles import EnvProfile, HostProfile
from devenv.env.runs import RUNS_FOLDER
from devenv.errors import DevenvError
from devenv.remote.base import Connection
from devenv.services.environments.contract import Check, ExecEntry, RunPlace, in_folder
from devenv.services.environments.docker.backend import Provisioner

GATE = "DEVENV_MEMORY_GATE"            # a file: builds and readiness wait until it exists
RENDEZVOUS = "DEVENV_MEMORY_RENDEZVOUS"  # a folder: the check waits (3 s at most) until two `up` reached it
BASE_IMAGE = "devenv/memory:1"         # the image the engine has from the start


def engine_dir() -> Path:
    return Path(os.environ["DEVENV_HOME"]) / "memory-engine"


class _Engine(MemoryRuntime):
    """MemoryRuntime whose exec runs commands for real (here), and whose build and readiness honour the gate."""

    def build(self, context, dockerfile, tag, buildargs, progress, labels=None, target=None):
        _wait_for_gate()
        return super().build(context, dockerfile, tag, buildargs, progress, labels, target)

    def exec(self, container: str, argv: list[str]) -> tuple[int, str, str]:
        if argv[:1] == ["devenv-ready"] and not _gate_open():
            self.calls.append(f"exec {container} {' '.join(argv)}")
            return 1, "\n".join(f"{s} down: starting" for s in argv[1:]), ""
        return super().exec(container, argv)

    def create(self, req):
        if any(c.name == req.name for c in self.containers.values()):  # as Docker answers: 409 Conflict
            raise DevenvError(f"Conflict: the container name {req.name} is already in use", "remove it")
        return super().create(req)


def container_folder(container: str) -> Path:
    """The container's own folder on this machine, where its commands run."""
    folder = engine_dir() / f"fs-{container}"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _gate_open() -> bool:
    gate = os.environ.get(GATE)
    return not gate or Path(gate).exists()


def _wait_for_gate() -> None:
    deadline = time.monotonic() + 300
    while not _gate_open() and time.monotonic() < deadline:
        time.sleep(0.05)


class SharedRuntime:
    """The engine as every process sees it: each call loads it from the file, runs, and saves it, under a lock."""

    def __init__(self, host: str):
        self.dir = engine_dir()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.host = host
        self.kind = "docker"
        self.bridgeless_network = None   # a bridge network of its own, as Docker's
        self.commit_builds = False       # builds the whole Dockerfile, as podman does

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        with open(self.dir / "lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            path = self.dir / "engine.pickle"
            engine = pickle.loads(path.read_bytes()) if path.exists() else _Engine(self.host, {BASE_IMAGE: "sha256:m"})
            try:
                return getattr(engine, name)(*args, **kwargs)
            finally:  # whole or not at all: a call interrupted by a signal leaves the engine as it was
                part = path.with_suffix(".part")
                part.write_bytes(pickle.dumps(engine))
                part.replace(path)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args, **kwargs: self._call(name, *args, **kwargs)

    def build(self, context, dockerfile, tag, buildargs, progress, labels=None, target=None):
        _wait_for_gate()  # outside the engine's lock: another process may use the engine meanwhile
        return self._call("build", context, dockerfile, tag, buildargs, None, labels, target)

    def logs(self, container: str, tail: int | str = 100, follow: bool = False) -> Iterator[str]:
        return iter(["memory engine: no log"])

    def exec_stream(self, container: str, argv: list[str], tty: bool = False, user: str = ""):
        """argv run here, in the container's folder, its output passed on as it comes."""
        if self._call("find", container) is None:
            raise DevenvError(f"no container {container}", "")
        workspace = container_folder(container)
        try:
            proc = subprocess.Popen(argv, cwd=workspace, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE)
        except FileNotFoundError:  # as an OCI runtime says it; the exit code of a shell's missing command
            said = f'exec: "{argv[0]}": executable file not found in $PATH\n'.encode()
            return iter([(b"", said)]), (lambda: 127)

        def chunks() -> Iterator[tuple[bytes, bytes]]:
            with selectors.DefaultSelector() as sel:
                sel.register(proc.stdout, selectors.EVENT_READ)  # type: ignore[arg-type]
                sel.register(proc.stderr, selectors.EVENT_READ)  # type: ignore[arg-type]
                while sel.get_map():
                    for key, _ in sel.select():
                        data = os.read(key.fileobj.fileno(), 65536)  # type: ignore[union-attr]
                        if not data:
                            sel.unregister(key.fileobj)
                        elif key.fileobj is proc.stdout:
                            yield data, b""
                        else:
                            yield b"", data

        return chunks(), proc.wait


def _memory_check(host: HostProfile, env: EnvProfile) -> CheckReport:
    """The preflight: it passes. With $DEVENV_MEMORY_RENDEZVOUS it first waits (3 s at most) until another
    process's check has begun too: a real host's check takes seconds, so two `up` started together are both
    past "is there one?" before either makes anything."""
    folder = os.environ.get(RENDEZVOUS)
    if folder:
        Path(folder, str(os.getpid())).touch()
        deadline = time.monotonic() + 3
        while len(os.listdir(folder)) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
    return CheckReport(host.name, env.name, [CheckResult("memory.engine", "Memory engine", PASS, "here")])


class MemoryBackend(Provisioner):
    """Environments in the memory engine (an EnvironmentBackend): the docker backend's steps, no daemon."""

    early_preflight = False     # the check is this file's, instant: nothing to overlap
    autostops = False           # no host beside it to run a watcher on

    @classmethod
    def open(cls, host: HostProfile, conn: Connection, check: Check | None = None) -> MemoryBackend:
        return cls(SharedRuntime(host.name), host, check)  # type: ignore[arg-type]

    def exec_entry(self, env: EnvProfile, argv: list[str], tty: bool = False) -> ExecEntry:
        """argv in the container's folder on this machine (the host is this machine: its own shell runs it)."""
        container = self.running_container_of(env.name)
        return ExecEntry(in_folder(str(container_folder(container)), argv), on_host=True)

    @classmethod
    def run_check(cls, conn: Connection, host: HostProfile, env: EnvProfile,
                  on_result: Callable[[CheckResult], None] | None = None) -> CheckReport:
        return _memory_check(host, env)

    @classmethod
    def run_preflight(cls, conn: Connection, host: HostProfile, env: EnvProfile,
                      allow_busy: bool = False) -> CheckReport:
        return _memory_check(host, env)

    def run_place(self, env: EnvProfile) -> RunPlace:
        """The docker backend's runs, their folder relative to the container's own folder here (exec's cwd)."""
        place = super().run_place(env)
        return replace(place, runs_dir=RUNS_FOLDER)
