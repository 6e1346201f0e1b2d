"""A project's devcontainer gets its own environment (issue 28, point 1), on the real test host: with one
environment running, `up` of a project with a devcontainer.json makes the project's own environment, named after
it, instead of offering to replace the running one; `--env <project>` then works in every command. With --sync,
the project is in the workspace before the devcontainer's lifecycle commands run there (point 2)."""

from __future__ import annotations

import json

import pytest
from env_testing import OWNER, docker

from devenv.env import spec as envspec

pytestmark = pytest.mark.integration


def test_a_projects_devcontainer_gets_its_own_environment(test_env, tmp_path):
    default = {"DEVENV_ENV": test_env.name}  # the environment every command uses when none is named
    first = json.loads(test_env.run("up", "testbox", "--detach", "--json", extra_env=default).stdout)
    assert first["env"] == test_env.name and first["action"] == "created"
    first_id = docker("inspect", "-f", "{{.Id}}", test_env.container).stdout.strip()

    project = tmp_path / f"proj-{test_env.name}"
    (project / ".devcontainer").mkdir(parents=True)
    (project / ".devcontainer" / "devcontainer.json").write_text(
        '{"image": "devenv-base:bookworm", "containerEnv": {"DC_MODE": "project"},'
        ' "postCreateCommand": "test -f requirements.txt && pwd > /tmp/post-create-ran-in",'
        ' "postStartCommand": "echo start >> /tmp/lifecycle", "postAttachCommand": "echo attach >> /tmp/lifecycle"}')
    (project / "requirements.txt").write_text("# the project is in the workspace before postCreateCommand\n")
    own = project.name
    try:
        up = test_env.run("up", "testbox", "--devcontainer", str(project), "--sync", str(project), "--detach",
                          "--json", extra_env=default)
        made = json.loads(up.stdout)
        assert made["env"] == own and made["action"] == "created", up.stderr
        assert f"its own environment '{own}' (on '{test_env.name}'" in up.stderr
        # the devcontainer's postCreateCommand ran in the project, synced before it (issue 28, point 2)
        ran_in = test_env.run("exec", "testbox", "--env", own, "--", "cat", "/tmp/post-create-ran-in")
        assert ran_in.stdout == f"/workspace/{project.name}\n"
        # the environment that was running is untouched: same container, still running
        assert docker("inspect", "-f", "{{.Id}} {{.State.Status}}", test_env.container).stdout.split() == \
            [first_id, "running"]

        status = json.loads(test_env.run("status", "testbox", "--json").stdout)
        assert {e["env"] for e in status["environments"]} >= {test_env.name, own}

        # --env <project> works in every command, from any folder, with no YAML
        shown = test_env.run("exec", "testbox", "--env", own, "--", "printenv", "DC_MODE")
        assert shown.stdout == "project\n"
        # containerEnv in ssh sessions too: exec with stdin goes through the environment's sshd (point 2)
        piped = test_env.run("exec", "testbox", "--env", own, "--", "sh", "-c", "read x; echo $x $DC_MODE",
                             stdin="via-ssh\n")
        assert piped.stdout == "via-ssh project\n", piped.stderr
        again = json.loads(test_env.run("up", "testbox", "--env", own, "--detach", "--json").stdout)
        assert again["env"] == own and again["action"] == "reattached"
        # the spec's order: postStart when it started, postAttach at every up (here: made, then reattached)
        lifecycle = test_env.run("exec", "testbox", "--env", own, "--", "cat", "/tmp/lifecycle").stdout
        assert lifecycle.split() == ["start", "attach", "attach"], lifecycle
        assert again["devcontainer"]["source"].endswith("devcontainer.json")
        down = test_env.run("down", "testbox", "--env", own)
        assert "Removed" in down.stdout
        assert docker("inspect", "-f", "{{.State.Status}}", test_env.container).stdout.strip() == "running"
    finally:
        docker("rm", "-f", envspec.container_name(OWNER, own))
        for volume in docker("volume", "ls", "-q", "--filter", f"label=org.devenv.env={own}").stdout.split():
            docker("volume", "rm", "-f", volume)
        for network in docker("network", "ls", "-q", "--filter", f"label=org.devenv.env={own}").stdout.split():
            docker("network", "rm", network)
