"""`devenv image push` between the test host's two engines, through the real CLI: dockerd (profile `testbox`) and
rootful podman (`testbox-podman`, the same sshd), each reached over SSH as a user would.

Each test makes an image of its own (the local Debian base plus a label of a fresh token: a new id that no
engine has, without a registry), pushes it, and checks the id on the other engine and a container started
from it; the cut stream kills the source's `docker save` process on the host midway and finds nothing loaded.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from devenv.cli import main
from devenv.env import image_push as push_model
from devenv.remote import pool
from testhost import apply_testhost_env

pytestmark = pytest.mark.integration
BASE = "devenv-base:bookworm"


def engine(name: str, *args: str, check: bool = False, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([name, *args], capture_output=True, text=True, check=check, timeout=300, input=stdin)


def image_id(name: str, image: str) -> str | None:
    found = engine(name, "image", "inspect", "--format", "{{.Id}}", image)
    return found.stdout.strip().removeprefix("sha256:") if found.returncode == 0 else None


class Image:
    """A fresh image in one engine, and an environment profile naming it (in this test's DEVENV_HOME)."""

    def __init__(self, made_in: str, home: Path):
        token = secrets.token_hex(4)
        self.name = f"devenv-push-test/img:{token}"
        self.env = f"push-{token}"
        base = BASE if made_in == "docker" else f"localhost/{BASE}"
        engine(made_in, "build", "-q", "-t", self.name, "-", stdin=f"FROM {base}\nLABEL org.devenv.test={token}\n",
               check=True)
        found = image_id(made_in, self.name)
        assert found, f"{made_in} did not make {self.name}"
        self.id = found
        envs = home / "profiles" / "envs"
        envs.mkdir(parents=True, exist_ok=True)
        (envs / f"{self.env}.yaml").write_text(f"description: image push test\nimage: {self.name}\ngpus: none\n")

    def remove(self) -> None:
        for name in ("docker", "podman"):
            engine(name, "rmi", "-f", self.id)


@pytest.fixture
def home(testhost, monkeypatch, tmp_path) -> Path:
    applied = apply_testhost_env(monkeypatch, testhost.env, tmp_path)
    yield Path(applied["DEVENV_HOME"])
    pool.close_all()


@pytest.fixture
def docker_image(home):
    image = Image("docker", home)
    yield image
    image.remove()


@pytest.fixture
def podman_image(home):
    image = Image("podman", home)
    yield image
    image.remove()


def cli(*args: str):
    result = CliRunner().invoke(main, list(args))
    print(f"\n$ devenv {' '.join(args)} -> {result.exit_code}\n{result.output[-2500:]}")
    assert "Traceback" not in result.output and result.exit_code != 70, result.output
    return result


def json_of(result) -> dict:
    return json.loads(result.stdout[result.stdout.index("{"):])


def test_push_docker_to_podman_then_skip(docker_image):
    assert image_id("podman", docker_image.id) is None
    pushed = cli("image", "push", "testbox", "testbox-podman", "--env", docker_image.env, "--json")
    assert pushed.exit_code == 0
    doc = json_of(pushed)
    row = doc["hosts"]["testbox-podman"]
    assert doc["schema_version"] == 1 and row["outcome"] == "pushed" and row["bytes"] > 0, doc
    # podman has the very image (same id), under the environment's name, and runs it
    assert image_id("podman", docker_image.name) == docker_image.id == row["image_id"]
    ran = engine("podman", "run", "--rm", docker_image.name, "cat", "/etc/debian_version")
    assert ran.returncode == 0 and ran.stdout.strip(), ran.stderr
    # the same id there now: nothing is streamed again
    again = cli("image", "push", "testbox", "testbox-podman", "--env", docker_image.env)
    assert again.exit_code == 0 and "testbox-podman: skipped, it has the same image" in again.output


def test_push_podman_to_docker(podman_image):
    assert image_id("docker", podman_image.id) is None
    pushed = cli("image", "push", "testbox-podman", "testbox", "--env", podman_image.env)
    assert pushed.exit_code == 0 and "testbox: pushed" in pushed.output and "verified" in pushed.output
    assert image_id("docker", podman_image.name) == podman_image.id
    ran = engine("docker", "run", "--rm", podman_image.name, "cat", "/etc/debian_version")
    assert ran.returncode == 0 and ran.stdout.strip(), ran.stderr


def _save_pids(image: str) -> list[int]:
    """This machine's `docker save IMAGE` processes (the test host is this machine)."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"save" in argv and image.encode() in argv and entry.name.isdigit():
            pids.append(int(entry.name))
    return pids


def _load_leftovers() -> set[str]:
    """What a `podman load` of stdin writes first (its input, whole, in a temp file) and devenv's TMPDIR for it."""
    return {p.name for p in Path("/var/tmp").iterdir() if p.name.startswith(("podman", "devenv-load."))}


def test_push_cut_midway_loads_nothing_and_says_so(docker_image, monkeypatch):
    before = _load_leftovers()
    killed: list[int] = []
    shown = push_model.progress_line

    def kill_save_at_first_progress(host: str, moved: int, seconds: float, total: int | None) -> str:
        """The relay waits while this runs: the save dies with the stream half sent, never after it."""
        if not killed:
            pids = _save_pids(docker_image.name)
            assert pids, "no docker save process on the test host while the stream runs"
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        return shown(host, moved, seconds, total)

    monkeypatch.setattr(push_model, "progress_line", kill_save_at_first_progress)
    cut = cli("image", "push", "testbox", "testbox-podman", "--env", docker_image.env)
    assert killed
    assert cut.exit_code == 1
    assert "testbox-podman: failed after" in cut.output and "the stream from testbox broke" in cut.output
    assert "nothing was loaded on testbox-podman" in cut.output and "Hint:" in cut.output
    assert image_id("podman", docker_image.id) is None and image_id("podman", docker_image.name) is None
    assert _load_leftovers() <= before  # not even the half archive podman had copied to a temp file
