"""`devenv image prune HOST` on the test host's real engines (dockerd, and rootful podman beside it): devenv's old
images go (a build a rebuild replaced, a tag no profile names), devenv's images in use or named by an env profile
stay, another tool's image is never looked at; --dry-run removes nothing; --json says the same; a second run
finds nothing left to do.

The engines are shared with other tests, so the removing runs are narrowed with --env to this test's own images
(their org.devenv.env label); the whole-host run is a dry run, which changes nothing. The images are LABEL-only
builds on the test host's base image: no layers, built in a moment, nothing pulled.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from testhost import BASE_IMAGE, apply_testhost_env

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[3]


class Engine:
    def __init__(self, cli: str, host: str):
        self.cli, self.host = cli, host
        self.made: list[str] = []
        self.containers: list[str] = []

    def __call__(self, *args: str, check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([self.cli, *args], capture_output=True, text=True, timeout=300, check=check,
                              input=stdin)

    def build(self, tag: str, *labels: str) -> str:
        dockerfile = f"FROM {BASE_IMAGE}\n" + "".join(f"LABEL {label}\n" for label in labels)
        self.made.append(tag)   # removed after the test, whatever happened
        self("build", "-q", "-t", tag, "-", stdin=dockerfile)
        made = self.image_id(tag)
        self.made.append(made)  # by id too: a rebuild takes the tag off it
        return made

    def image_id(self, ref: str) -> str:
        done = self("image", "inspect", "--format", "{{.Id}}", ref, check=False)
        return done.stdout.strip().removeprefix("sha256:") if done.returncode == 0 else ""


@pytest.fixture(params=[("docker", "testbox"), ("podman", "testbox-podman")], ids=["docker", "podman"])
def engine(request, testhost, monkeypatch, tmp_path):
    cli, host = request.param
    applied = apply_testhost_env(monkeypatch, testhost.env, tmp_path)
    made = Engine(cli, host)
    made.home = Path(applied["DEVENV_HOME"])  # type: ignore[attr-defined]
    made.environ = {**os.environ, **applied}  # type: ignore[attr-defined]
    yield made
    for name in made.containers:
        made("rm", "-f", name, check=False)
    for ref in made.made:
        if ref:
            made("rmi", ref, check=False)


def devenv(engine: Engine, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "devenv", *args], capture_output=True, text=True, timeout=300,
                          env=engine.environ, cwd=REPO, input="")  # type: ignore[attr-defined]


def test_image_prune_removes_devenv_images_no_environment_uses_and_nothing_else(engine):
    tag = secrets.token_hex(3)
    env = f"prune-{tag}"
    repo = f"devenv-prunetest/{tag}"
    old = engine.build(f"{repo}:env", f"org.devenv.env={env}", "nonce=old")
    new = engine.build(f"{repo}:env", f"org.devenv.env={env}", "nonce=new")      # the rebuild: old is dangling
    used = engine.build(f"{repo}:used", f"org.devenv.env={env}", "nonce=used")
    named = engine.build(f"{repo}:profile", f"org.devenv.env={env}", "nonce=profile")
    other = engine.build(f"prunetest-other/{tag}:x", f"com.example.tool={tag}")     # another tool's, unused
    container = f"prunetest-{tag}"
    engine.containers.append(container)
    engine("create", "--name", container, f"{repo}:used", "true")
    profile = (engine.home / "profiles" / "envs" / "cpu.yaml").read_text()  # type: ignore[attr-defined]
    (engine.home / "profiles" / "envs" / f"prune{tag}.yaml").write_text(  # type: ignore[attr-defined]
        "\n".join(f"image: {repo}:profile" if line.startswith("image:") else line for line in profile.splitlines()))

    dry = devenv(engine, "image", "prune", engine.host, "--env", env, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    found = json.loads(dry.stdout)
    assert found["schema_version"] == 1 and found["dry_run"] is True and found["env"] == env
    actions = {i["id"]: i for i in found["images"]}
    assert set(actions) == {i[:19] for i in (old, new, used, named)}, found   # never the other tool's
    assert actions[old[:19]]["action"] == "remove" and actions[old[:19]]["tags"] == []
    assert actions[new[:19]]["action"] == "remove"
    assert actions[used[:19]]["action"] == "kept" and container in actions[used[:19]]["reason"]
    assert actions[named[:19]]["action"] == "kept" and "env profile names" in actions[named[:19]]["reason"]
    assert all(engine.image_id(i) for i in (old, new, used, named, other))        # a dry run removes nothing

    everything = devenv(engine, "image", "prune", engine.host, "--dry-run", "--json")
    assert everything.returncode == 0, everything.stdout + everything.stderr
    listed = json.loads(everything.stdout)["images"]
    assert other[:19] not in {i["id"] for i in listed} and all(i["env"] for i in listed), listed
    assert {i["id"]: i["action"] for i in listed}[used[:19]] == "kept"

    done = devenv(engine, "image", "prune", engine.host, "--env", env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{repo}:env (" in done.stderr and f"untagged image {old[:12]}" in done.stderr, done.stderr
    assert "Removed 2 image(s)" in done.stdout, done.stdout
    assert not engine.image_id(old) and not engine.image_id(new)
    assert engine.image_id(used) and engine.image_id(named) and engine.image_id(other)

    again = devenv(engine, "image", "prune", engine.host, "--env", env, "--json")
    assert again.returncode == 0 and not [i for i in json.loads(again.stdout)["images"] if i["action"] != "kept"]


def test_image_prune_errors_are_said_before_anything_is_removed(engine):
    bad = devenv(engine, "image", "prune", engine.host, "--env", "../x")
    assert bad.returncode == 2 and "is not an environment name" in bad.stderr, bad.stderr
    profile = engine.home / "profiles" / "hosts" / "slurmish.yaml"  # type: ignore[attr-defined]
    profile.write_text("ssh:\n  alias: testbox\nruntime: slurm\npython: python3\ndefault_env: cpu\n")
    slurm = devenv(engine, "image", "prune", "slurmish", "--dry-run")
    assert slurm.returncode == 1 and "there is no image to prune" in slurm.stderr, slurm.stderr
    assert "Traceback" not in bad.stderr + slurm.stderr
