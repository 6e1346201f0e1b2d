"""A host without Docker (`runtime: host`): the same commands run Jupyter detached with the host's python on
its loopback, tracked by a state file on the host; no second sshd."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from env_testing import processes_mentioning, read_url
from jupyter_client import JupyterClient

pytestmark = pytest.mark.integration


def test_host_runtime_lifecycle(test_env, host_python):
    env = test_env.name
    host = f"bare-{env}"
    (test_env.home / "profiles" / "hosts" / f"{host}.yaml").write_text(
        f"description: the test host without Docker\nssh:\n  alias: testbox\nruntime: host\n"
        f"python: {host_python}\ndefault_env: {env}\n")

    try:
        lifecycle(test_env, env, host, host_python)
    finally:  # whatever failed, leave no Jupyter and no files behind on the host
        test_env.run("down", host, "--purge", "--yes", check=False)
        shutil.rmtree(os.path.expanduser(f"~/.devenv/envs/t-{env}"), ignore_errors=True)
        shutil.rmtree(os.path.expanduser(f"~/devenv-workspaces/{env}"), ignore_errors=True)


def lifecycle(test_env, env: str, host: str, host_python: str) -> None:
    up = test_env.run("up", host, "--detach", "--json")
    result = json.loads(up.stdout)
    assert result["action"] == "created" and result["status"]["runtime"] == "host", up.stderr
    pid = int(result["status"]["container"])
    port = result["status"]["ports"]["jupyter"]
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    assert host_python in cmdline and "jupyterlab" in cmdline
    assert "token" not in cmdline.lower(), "the token must never be on a command line"
    state_dir = Path(os.path.expanduser(f"~/.devenv/envs/t-{env}"))
    assert oct((state_dir / "jupyter_token").stat().st_mode)[-3:] == "600"
    listening = subprocess.run(["ss", "-ltnH", f"( sport = :{port} )"], capture_output=True, text=True).stdout
    assert [line.split()[3] for line in listening.splitlines()] == [f"127.0.0.1:{port}"]   # loopback only

    again = json.loads(test_env.run("up", host, "--detach", "--json").stdout)
    assert again["action"] == "reattached" and again["status"]["container"] == str(pid)

    proc = test_env.popen("jupyter", host)
    try:
        with JupyterClient(read_url(proc)) as jc:
            run = jc.execute(jc.start_kernel(), "import os, torch\nprint(torch.__version__.split('+')[0] > '2')\n"
                                                "os.getcwd()")
        assert run.status == "ok" and run.stdout == "True\n", run
        assert run.result.strip("'").endswith(f"devenv-workspaces/{env}")
    finally:
        proc.terminate()
        proc.wait(15)

    ran = test_env.run("exec", host, "--", "sh", "-c", "echo kept > note && pwd")
    assert ran.stdout.strip().endswith(f"devenv-workspaces/{env}")
    listed = json.loads(test_env.run("status", host, "--json").stdout)
    assert [e["state"] for e in listed["environments"] if e["env"] == env] == ["running"]

    test_env.run("down", host)
    assert not Path(f"/proc/{pid}").exists()
    workspace = Path(os.path.expanduser(f"~/devenv-workspaces/{env}"))
    assert (workspace / "note").read_text() == "kept\n", "down keeps the workspace"
    after = json.loads(test_env.run("status", host, "--json").stdout)["environments"]
    assert [e for e in after if e["env"] == env] == []

    test_env.run("down", host, "--purge", "--yes")
    assert not state_dir.exists() and not workspace.exists()
    assert not processes_mentioning(f"t-{env}/jupyter_server_config.py")
