"""An env profile's pip:, apt: and user: baked into the image on the real test host (pip from PyPI with the
host's CA bundle, apt from Debian's mirror, which containers here reach); a change of the list rebuilds."""

from __future__ import annotations

import json

import pytest
from env_testing import docker

pytestmark = pytest.mark.integration

IMAGE = "devenv-test/pytorch:loop-extras"   # not the shared slim tag: this one carries the lists


def test_pip_apt_and_user_are_in_the_image_and_a_change_rebuilds(test_env):
    env = test_env.name
    profile = test_env.home / "profiles" / "envs" / f"{env}.yaml"
    base = profile.read_text().replace("image: devenv-test/pytorch:slim", f"image: {IMAGE}")
    profile.write_text(base + "pip:\n  - inflection==0.5.1\napt: [tree]\nuser: alice\n")

    first = json.loads(test_env.run("up", "testbox", "--env", env, "--json", timeout=900).stdout)
    assert first["action"] == "created"
    label = docker("image", "inspect", "-f", '{{index .Config.Labels "org.devenv.content"}}', IMAGE).stdout.strip()
    assert len(label) == 16
    got = test_env.run("exec", "testbox", "--env", env, "--", "sh", "-c",
                       "whoami; python -c 'import inflection; print(inflection.__version__)'; tree --version")
    who, version, tree = got.stdout.splitlines()[:3]
    assert (who, version) == ("alice", "0.5.1") and tree.startswith("tree v"), got.stdout + got.stderr

    # another version in the list: the image is rebuilt (its content label differs), the container recreated
    profile.write_text(base + "pip:\n  - inflection==0.5.0\napt: [tree]\nuser: alice\n")
    second = test_env.run("up", "testbox", "--env", env, "--json", "--yes", timeout=900)
    result = json.loads(second.stdout)
    assert result["action"] == "recreated" and result["image"] == "built", second.stderr
    assert "rebuilding it" in second.stderr
    again = test_env.run("exec", "testbox", "--env", env, "--", "python", "-c",
                         "import inflection; print(inflection.__version__)")
    assert again.stdout.strip() == "0.5.0"
    assert docker("image", "inspect", "-f", '{{index .Config.Labels "org.devenv.content"}}',
                  IMAGE).stdout.strip() != label
