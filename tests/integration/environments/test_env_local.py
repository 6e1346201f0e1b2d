"""The bundled `local` host: the same environment on this machine's own dockerd, no SSH and no tunnel."""

from __future__ import annotations

import pytest
from jupyter_client import JupyterClient

pytestmark = pytest.mark.integration


def test_local_host_up_reaches_jupyter_and_ssh_directly(test_env):
    env = test_env.name
    up = test_env.run("up", "local", "--env", env)   # local: nothing to tunnel, so it returns
    url = next(line.split()[-1] for line in up.stdout.splitlines() if "token=" in line)
    assert url.startswith("http://127.0.0.1:")
    with JupyterClient(url) as jc:
        run = jc.execute(jc.start_kernel(), "print(sum(range(10)))")
    assert run.status == "ok" and run.stdout == "45\n"
    ssh = test_env.run("ssh", "local", "--env", env, "--", "cat /etc/hostname")
    assert ssh.stdout.strip() == f"devenv-{env}"
    listed = test_env.run("status", "local", "--json").stdout
    assert f'"env": "{env}"' in listed
    test_env.run("down", "local", "--env", env, "--purge", "--yes")
    assert test_env.containers() == [] and test_env.volumes() == []
