"""The published ports are the only way in (issue 14): each environment has a bridge network of its own, so a
sibling container on the engine's default network cannot open Jupyter's or sshd's port, while the ports the host
publishes on its 127.0.0.1 still answer. The network is labelled, reused by a re-`up`, removed by `down`.
"""

from __future__ import annotations

import json
import secrets
import socket
import urllib.request
from pathlib import Path

import pytest
from env_testing import OWNER, PodmanEnv, base_environ, docker, podman
from sshd_fixture import free_port

from devenv.env import spec as envspec
from testhost import BASE_IMAGE, apply_testhost_env

pytestmark = pytest.mark.integration

# Run in a sibling container on Docker's default bridge: one line per port, "open" or why it is not.
_PROBE = """
import socket, sys
for port in sys.argv[2:]:
    s = socket.socket()
    s.settimeout(5)  # a hang guard: a dropped SYN is as closed as a refused one
    try:
        s.connect((sys.argv[1], int(port)))
        print(port, "open")
    except OSError as exc:
        print(port, "closed", type(exc).__name__)
    finally:
        s.close()
"""


def _sibling_probe(address: str, ports: list[int]) -> dict[int, str]:
    done = docker("run", "--rm", BASE_IMAGE, "python3", "-c", _PROBE, address, *map(str, ports))
    assert done.returncode == 0, done.stderr
    return {int(line.split()[0]): line.split()[1] for line in done.stdout.splitlines()}


def _inspect(name: str) -> dict:
    return json.loads(docker("inspect", name, check=True).stdout)[0]


def test_a_sibling_container_cannot_reach_the_environment_but_the_published_ports_answer(test_env):
    env = test_env.name
    result = json.loads(test_env.run("up", "testbox", "--env", env, "--detach", "--json").stdout)
    ports = result["status"]["ports"]

    # on its own labelled network, not on the default bridge
    networks = _inspect(test_env.container)["NetworkSettings"]["Networks"]
    own = envspec.network_name(OWNER, env)
    assert list(networks) == [own], networks
    labels = json.loads(docker("network", "inspect", own, check=True).stdout)[0]["Labels"]
    assert labels[envspec.OWNER] == OWNER and labels[envspec.ENV] == env and labels[envspec.ROLE] == "network"
    address = networks[own]["IPAddress"]
    assert address

    # a sibling on the default bridge: neither service answers it
    assert _sibling_probe(address, [8888, 22]) == {8888: "closed", 22: "closed"}
    # the control: the same probe from a container on the environment's network does connect (so "closed"
    # above is the network's doing, not a probe that cannot connect)
    inside = docker("run", "--rm", "--network", own, BASE_IMAGE, "python3", "-c", _PROBE, address, "8888", "22")
    assert inside.stdout.split() == ["8888", "open", "22", "open"], (inside.stdout, inside.stderr)

    # the host's loopback ports still answer
    with urllib.request.urlopen(f"http://127.0.0.1:{ports['jupyter']}/api", timeout=30) as resp:
        assert "version" in json.load(resp)
    with socket.create_connection(("127.0.0.1", ports["ssh"]), timeout=30) as s:
        s.settimeout(30)
        assert s.recv(64).startswith(b"SSH-")
    # ... and so does devenv's own way in
    assert test_env.run("exec", "testbox", "--env", env, "--", "echo", "in").stdout.strip() == "in"

    # re-up reuses the network (one, the same)
    again = json.loads(test_env.run("up", "testbox", "--env", env, "--detach", "--json").stdout)
    assert again["action"] == "reattached"
    assert test_env.networks() == [own]

    # down removes it
    down = json.loads(test_env.run("down", "testbox", "--env", env, "--json").stdout)
    assert down["networks"] == [own]
    assert test_env.networks() == []


def test_a_network_left_without_its_container_is_reused_then_removed_by_down(test_env):
    """An `up` interrupted after making the network (or a container removed by hand) leaves a network: the next
    `up` takes it (found by its labels), and `down` removes it even with no container left."""
    env = test_env.name
    test_env.run("up", "testbox", "--env", env, "--detach", "--json")
    own = envspec.network_name(OWNER, env)
    docker("rm", "-f", test_env.container, check=True)
    assert test_env.networks() == [own]

    result = json.loads(test_env.run("up", "testbox", "--env", env, "--detach", "--json").stdout)
    assert result["action"] == "created"
    assert list(_inspect(test_env.container)["NetworkSettings"]["Networks"]) == [own]
    assert test_env.networks() == [own]

    docker("rm", "-f", test_env.container, check=True)
    down = json.loads(test_env.run("down", "testbox", "--env", env, "--json").stdout)
    assert down["networks"] == [own] and down["removed"] == [] and down["verb"] == "Removed container"
    assert test_env.networks() == []


def test_a_network_of_that_name_that_is_not_ours_is_refused(test_env):
    env = test_env.name
    own = envspec.network_name(OWNER, env)
    docker("network", "create", "--label", f"{envspec.ENV}={env}", own, check=True)  # not managed, no owner
    try:
        up = test_env.run("up", "testbox", "--env", env, "--detach", check=False)
        assert up.returncode == 1, (up.stdout, up.stderr)
        assert f"a network named {own} exists" in up.stderr and "not this environment's" in up.stderr
        assert test_env.containers() == []
    finally:
        docker("network", "rm", own)


@pytest.fixture
def podman_env(testhost, podman_slim_image, monkeypatch, tmp_path) -> PodmanEnv:
    applied = apply_testhost_env(monkeypatch, testhost.env, tmp_path)
    home = Path(applied["DEVENV_HOME"])
    env = PodmanEnv(f"podnet-{secrets.token_hex(2)}", home, base_environ(applied, home))
    env.write_profile(ports={"jupyter": free_port(), "ssh": free_port()})
    yield env
    env.remove_everything()


# Run in a sibling container: whether each address:port gives a service's own answer (an SSH banner, or
# Jupyter's HTTP reply), not merely a connect: a sandbox's egress may accept any connect to an outside address.
_ANSWER_PROBE = """
import socket, sys
for target in sys.argv[1:]:
    address, port = target.rsplit(":", 1)
    s = socket.socket()
    s.settimeout(5)
    try:
        s.connect((address, int(port)))
        s.sendall(b"GET /api HTTP/1.0\\r\\n\\r\\n") if int(port) != 22 else None
        data = s.recv(64)
        print(target, "answers" if data.startswith((b"SSH-", b"HTTP/")) else "silent")
    except OSError as exc:
        print(target, "closed", type(exc).__name__)
    finally:
        s.close()
"""


def test_on_podman_a_sibling_cannot_reach_the_environment_but_the_published_ports_answer(podman_env):
    """podman 4.3's CNI networks forward between bridges (masqueraded as the gateway), so a network of its own
    would not keep a sibling out: where slirp4netns is installed the environment is on no bridge at all, and
    only the ports published on the host's 127.0.0.1 reach it (slirp4netns's port handler)."""
    env = podman_env.name
    result = json.loads(podman_env.run("up", "testbox-podman", "--env", env, "--detach", "--json").stdout)
    ports = result["status"]["ports"]
    [name] = podman_env.containers()
    inspect = json.loads(podman("inspect", name, check=True).stdout)[0]
    addresses = [n.get("IPAddress") for n in (inspect["NetworkSettings"].get("Networks") or {}).values()]
    assert not any(addresses), addresses  # on no bridge: nothing a sibling could route to
    assert podman_env.networks() == []
    # a sibling on podman's default network: neither the container's ports nor the published ones answer,
    # at any address of the environment or of the host it can reach
    gateway = json.loads(podman("network", "inspect", "podman", check=True).stdout)[0]["subnets"][0]["gateway"]
    targets = [f"{a}:{p}" for a in [gateway, *filter(None, addresses)]
               for p in (8888, 22, ports["jupyter"], ports["ssh"])]
    done = podman("run", "--rm", BASE_IMAGE, "python3", "-c", _ANSWER_PROBE, *targets)
    assert done.returncode == 0, done.stderr
    assert "answers" not in done.stdout, done.stdout
    # the control: inside the environment's own network namespace both services answer
    inside = podman("exec", name, "python3", "-c", _ANSWER_PROBE, "127.0.0.1:8888", "127.0.0.1:22")
    assert inside.stdout.split() == ["127.0.0.1:8888", "answers", "127.0.0.1:22", "answers"], inside
    with urllib.request.urlopen(f"http://127.0.0.1:{ports['jupyter']}/api", timeout=30) as resp:
        assert "version" in json.load(resp)
    with socket.create_connection(("127.0.0.1", ports["ssh"]), timeout=30) as s:
        s.settimeout(30)
        assert s.recv(64).startswith(b"SSH-")
    assert podman_env.run("exec", "testbox-podman", "--env", env, "--", "echo", "in").stdout.strip() == "in"
    again = json.loads(podman_env.run("up", "testbox-podman", "--env", env, "--detach", "--json").stdout)
    assert again["action"] == "reattached" and podman_env.networks() == []
    down = json.loads(podman_env.run("down", "testbox-podman", "--env", env, "--json").stdout)
    assert down.get("networks", []) == [] and podman_env.containers() == []
