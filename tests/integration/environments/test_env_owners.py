"""Two owners whose names once collided (owner `a` + env `b-c` and owner `a-b` + env `c` were both
devenv-a-b-c): each reaches only their own environment; `down` of one leaves the other (issue 14)."""

from __future__ import annotations

import json

import pytest
from env_testing import EnvUnderTest, docker
from sshd_fixture import free_port

pytestmark = pytest.mark.integration


def test_colliding_owner_and_env_names_stay_apart(test_env):
    # owner t + env q-N, and owner t-q + env N: the same old name devenv-t-q-N
    first = EnvUnderTest(f"q-{test_env.name}", test_env.home, test_env.environ)
    first.write_profile(ports={"jupyter": free_port(), "ssh": free_port()})
    other = {"DEVENV_OWNER": "t-q"}
    try:
        a = json.loads(first.run("up", "testbox", "--env", first.name, "--detach", "--json").stdout)
        b = json.loads(test_env.run("up", "testbox", "--env", test_env.name, "--detach", "--json",
                                    extra_env=other).stdout)
        assert a["action"] == b["action"] == "created"
        assert a["status"]["container"] != b["status"]["container"]
        assert a["status"]["owner"] == "t" and b["status"]["owner"] == "t-q"

        def env_seen(env: EnvUnderTest, extra=None) -> str:
            return env.run("exec", "testbox", "--env", env.name, "--", "sh", "-c", "echo $DEVENV_ENV",
                           extra_env=extra).stdout.strip()

        assert env_seen(first) == first.name
        assert env_seen(test_env, other) == test_env.name
        # owner t has no environment named N: exec and down find nothing of the other owner's
        assert test_env.run("exec", "testbox", "--env", test_env.name, "--", "true", check=False).returncode == 1
        test_env.run("down", "testbox", "--env", test_env.name, extra_env=other)
        running = docker("inspect", "-f", "{{.State.Status}}", a["status"]["container"]).stdout.strip()
        assert running == "running"
        assert docker("inspect", b["status"]["container"]).returncode != 0
    finally:
        first.remove_everything()
