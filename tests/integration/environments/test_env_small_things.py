"""Small things a user notices (issue 28, point 7), on the real test host: `exec -t` ends without ssh's
"Connection ... closed."; without a terminal, every step that needs a confirmation is refused with one code
(2) and a hint naming the host; `down --purge` also takes the environment's ssh entry and pinned key away."""

from __future__ import annotations

import json
import re

import pytest

from devenv.remote.openssh import env_alias

pytestmark = pytest.mark.integration


def test_exec_tty_confirmations_without_a_terminal_and_purge_of_the_ssh_entry(test_env):
    env = test_env.name
    test_env.run("up", "testbox", "--env", env, "--detach")
    alias = env_alias("testbox", env)
    config, known = test_env.home / "ssh" / "config", test_env.home / "ssh" / "known_hosts"
    assert re.search(rf"^Host {re.escape(alias)}$", config.read_text(), re.M), "up wrote no ssh entry"
    assert alias in known.read_text()

    # readiness probes (up's wait, status's answers) leave no "[preauth]" line in the environment's log
    test_env.run("status", "testbox")
    log = test_env.run("logs", "testbox", "--env", env, "--tail", "500").stdout
    assert "Server listening" in log, log[-2000:]  # sshd's own lines still come through
    probes = re.findall(r"^Connection (?:closed|reset) by \S+ port \d+ \[preauth\]$", log, re.M)
    assert probes == [], probes[:3]

    # exec -t: the command's output and code, and no "Connection to ... closed." from ssh
    tty = test_env.run("exec", "testbox", "--env", env, "-t", "--", "sh", "-c", "echo in-a-tty; exit 3", check=False)
    assert tty.returncode == 3 and "in-a-tty" in tty.stdout, tty.stderr
    assert "closed" not in tty.stderr, tty.stderr
    # what the README says the image has (issue 28, point 8): `exec -t -- top` and vi, git, rsync
    tools = test_env.run("exec", "testbox", "--env", env, "--", "sh", "-c", "for t in top vi git rsync; do "
                         "command -v $t; done; top -bn1 | head -1")
    assert len(tools.stdout.splitlines()) == 5 and tools.stdout.splitlines()[-1].startswith("top"), tools.stdout

    # JupyterLab as a tool's own image serves it: the news prompt's plugin is off in the page it sends
    page = test_env.run("exec", "testbox", "--env", env, "--", "python3", "-c",
                        "import urllib.request; t = open('/etc/devenv/jupyter_token').read().strip(); "
                        "print(urllib.request.urlopen(f'http://127.0.0.1:8888/lab?token={t}').read().decode())")
    config = json.loads(page.stdout.split('id="jupyter-config-data"', 1)[1].split(">", 1)[1]
                        .split("</script>", 1)[0])
    disabled = config.get("disabledExtensions")
    assert "@jupyterlab/apputils-extension:announcements" in (disabled or []), disabled
    if isinstance(disabled, dict):
        assert disabled["@jupyterlab/apputils-extension:announcements"] is True

    # without a terminal, a confirmation is never assumed: the same exit code (2) wherever one is needed
    profile = test_env.home / "profiles" / "envs" / f"{env}.yaml"
    profile.write_text(profile.read_text() + "env:\n  CHANGED: '1'\n")
    recreate = test_env.run("up", "testbox", "--env", env, "--detach", check=False)
    assert recreate.returncode == 2, recreate.stderr
    assert "differs from" in recreate.stderr and f"devenv up testbox --env {env} --yes" in recreate.stderr
    purge = test_env.run("down", "testbox", "--env", env, "--purge", check=False)
    assert purge.returncode == 2 and "cannot ask here" in purge.stderr, purge.stderr
    include = test_env.run("ssh-config", "install", check=False,
                           extra_env={"DEVENV_SSH_CONFIG": str(test_env.home / "user_ssh_config")})
    assert include.returncode == 2 and "--yes" in include.stderr, include.stderr
    assert test_env.containers(), "a refused step changed the environment"

    # down --purge leaves nothing of it here either: no ssh entry, no pinned key
    done = test_env.run("down", "testbox", "--env", env, "--purge", "--yes")
    assert "Removed" in done.stdout, done.stdout
    assert not re.search(rf"^Host {re.escape(alias)}$", config.read_text(), re.M)
    assert alias not in known.read_text()
    assert test_env.containers() == [] and test_env.volumes() == []
