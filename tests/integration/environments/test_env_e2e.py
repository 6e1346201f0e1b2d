"""The whole life of an environment on the real test host, through the CLI as a user drives it:
up -> a Jupyter kernel through devenv's tunnel runs code -> OpenSSH into the environment as devenv instructs
-> the workspace survives down + up -> status works without the laptop's state -> down --purge leaves nothing."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from env_testing import docker, processes_mentioning, read_url
from jupyter_client import JupyterClient

from devenv.remote.openssh import env_alias
from devenv.remote.tunnels import control_dir_path

pytestmark = pytest.mark.integration


def test_environment_lifecycle_end_to_end(test_env, testhost):
    env = test_env.name

    # up: check, image (present), volume, container, secrets, wait; detached, so no tunnel is held.
    up = test_env.run("up", "testbox", "--env", env, "--detach", "--json")
    result = json.loads(up.stdout)
    assert result["action"] == "created", up.stderr
    assert "Checking testbox" in up.stderr and "Waiting for jupyter and sshd" in up.stderr
    status = result["status"]
    assert status["state"] == "running" and set(status["ports"]) == {"jupyter", "ssh"}

    # Published on the host's loopback only, and the token is nowhere in docker inspect.
    inspect = json.loads(docker("inspect", test_env.container, check=True).stdout)[0]
    bindings = [b for bs in inspect["NetworkSettings"]["Ports"].values() for b in (bs or [])]
    assert bindings and all(b["HostIp"] == "127.0.0.1" for b in bindings)
    state = json.loads((test_env.home / "state" / "envs" / "testbox" / f"{env}.json").read_text())
    token = state["token"]
    assert len(token) >= 32 and token not in json.dumps(inspect)
    assert oct((test_env.home / "state" / "envs" / "testbox" / f"{env}.json").stat().st_mode)[-3:] == "600"

    # A real Jupyter client through devenv's tunnel: REST to start a kernel, its websocket to run code.
    proc = test_env.popen("jupyter", "testbox", "--env", env)
    try:
        url = read_url(proc)
        assert f"token={token}" in url
        with JupyterClient(url) as jc:
            kernel = jc.start_kernel()
            run = jc.execute(kernel, "import os, platform\nprint(6 * 7)\nos.getcwd()")
        assert run.status == "ok", run
        assert run.stdout == "42\n" and run.result == "'/workspace'"
        # Without the token, Jupyter refuses.
        import requests
        denied = requests.get(url.split("/lab")[0] + "/api/kernels", timeout=10)
        assert denied.status_code == 403
    finally:
        proc.terminate()
        assert proc.wait(15) == 0, proc.stderr.read()
    local_port = url.split(":")[2].split("/")[0]
    assert not processes_mentioning(f"127.0.0.1:{local_port}:"), "the tunnel's ssh outlived devenv jupyter"
    assert not processes_mentioning(str(control_dir_path())), "the tunnels' ControlMaster outlived devenv jupyter"

    # OpenSSH into the environment exactly as devenv instructs: the config entry it prints.
    shown = test_env.run("ssh", "testbox", "--env", env, "--config").stdout
    include = next(line for line in shown.splitlines() if line.startswith("Include "))
    config = include.split(" ", 1)[1]
    alias = env_alias("testbox", env)  # the env's "-" doubled (issue 14: aliases name one pair)
    ssh = subprocess.run(["ssh", "-F", config, "-o", "BatchMode=yes", alias,
                          "echo from-ssh > /workspace/kept.txt; python -c 'import sys; print(sys.prefix)'; hostname"],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert ssh.returncode == 0, ssh.stderr
    assert ssh.stdout.split() == ["/opt/venv", f"devenv-{env}"]

    # Its sshd lets in devenv's key only: the key that opens the host itself is refused there.
    known_hosts = str(Path(config).with_name("known_hosts"))
    refused = subprocess.run(["ssh", "-F", "/dev/null", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
                              "-i", str(testhost.identity_file), "-o", f"HostKeyAlias={alias}",
                              "-o", f"UserKnownHostsFile={known_hosts}", "-o", "StrictHostKeyChecking=yes",
                              "-o", f"ProxyCommand={_proxy(config, alias)}", "-p", str(status["ports"]["ssh"]),
                              "root@127.0.0.1", "true"],
                             capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert refused.returncode == 255 and "Permission denied (publickey)" in refused.stderr, refused.stderr

    # `devenv tunnel` forwards any port of the environment (here a web server started in it) to this machine.
    test_env.run("exec", "testbox", "--env", env, "--", "sh", "-c",
                 "cd /workspace && nohup python -m http.server 8765 >/dev/null 2>&1 &")
    proc = test_env.popen("tunnel", "testbox", "8765", "--env", env)
    try:
        mapping = proc.stdout.readline().strip()
        assert mapping.endswith(f"-> {env}:8765"), (mapping, proc.stderr.read() if proc.poll() is not None else "")
        local = int(mapping.split()[0].rsplit(":", 1)[1])
        import requests
        listing = requests.get(f"http://127.0.0.1:{local}/", timeout=10)
        assert listing.status_code == 200 and "kept.txt" in listing.text
    finally:
        proc.terminate()
        proc.wait(15)

    # down keeps the workspace; up brings the file back in a new container.
    down = test_env.run("down", "testbox", "--env", env)
    assert "Removed container" in down.stdout
    assert test_env.containers() == [] and test_env.volumes() == [test_env.volume]
    again = json.loads(test_env.run("up", "testbox", "--env", env, "--detach", "--json").stdout)
    assert again["action"] == "created"
    cat = test_env.run("exec", "testbox", "--env", env, "--", "cat", "/workspace/kept.txt")
    assert cat.stdout == "from-ssh\n"

    # The laptop's state is a cache: without it, status reads the truth from the host's labels,
    # and `devenv jupyter` recovers the token from the environment itself.
    shutil.rmtree(test_env.home / "state")
    listed = json.loads(test_env.run("status", "testbox", "--json").stdout)
    mine = [e for e in listed["environments"] if e["env"] == env]
    assert len(mine) == 1 and mine[0]["state"] == "running" and mine[0]["owner"] == "t"
    assert mine[0]["ports"] == again["status"]["ports"]
    proc = test_env.popen("jupyter", "testbox", "--env", env)
    try:
        with JupyterClient(read_url(proc)) as jc:
            assert jc.api("/api/status").status_code == 200
    finally:
        proc.terminate()
        proc.wait(15)

    # down --purge: no container, no volume, no stray process left on the host.
    purged = test_env.run("down", "testbox", "--env", env, "--purge", "--yes")
    assert "Deleted volume" in purged.stdout
    assert test_env.containers() == [] and test_env.volumes() == []
    assert docker("volume", "inspect", test_env.volume).returncode != 0
    assert not processes_mentioning(test_env.container)
    assert not [p for p in processes_mentioning("devenv") if f"--env {env}" in p]


def _proxy(config: str, alias: str) -> str:
    """The ProxyCommand devenv wrote for alias (through the host), to try another key over the same path."""
    text = open(config).read().split(f"Host {alias}\n", 1)[1]
    return next(line.split("ProxyCommand ", 1)[1] for line in text.splitlines() if "ProxyCommand" in line)
