"""GPU-host scenarios through the real CLI over one real sshd (docs/gpu-scenarios.md holds the table).

The host's nvidia-smi is tests/replay/nvidia-smi (real H200 recordings; each scenario's output and where its
format comes from is in that script's docstring), switched per test through REPLAY_SCENARIO_FILE, so the module
needs one sshd. The sshd runs in a private mount namespace where /usr/lib is an overlay that adds
/usr/lib/wsl/lib (a symlink to a folder of ours): "nvidia-smi only in WSL's folder, not on PATH" is real for
its sessions and nothing changes on this machine. Every command must end with its documented exit code, one
error or verdict with the reason, no traceback, no exit 70, no hang.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner
from monitor_helpers import REPLAY_DIR, replay_sshd
from sshd_fixture import make_key

from devenv.cli import main
from devenv.remote import pool

FIXTURES = REPLAY_DIR.parent / "fixtures"
TORCH_PYTHON = os.path.realpath(os.popen("python3 -c 'import sys; print(sys.executable)'").read().strip())


class Host:
    def __init__(self, root: Path, server, key):
        self.root, self.server, self.key = root, server, key
        self.scenario_file = root / "scenario"
        self.pathbin = root / "pathbin"
        self.wslbin = root / "wslbin"

    def set(self, scenario: str, where: str = "path") -> None:
        """The scenario the replay plays; where nvidia-smi is: on PATH, only in /usr/lib/wsl/lib, or nowhere."""
        self.scenario_file.write_text(scenario + "\n")
        for folder in (self.pathbin, self.wslbin):
            (folder / "nvidia-smi").unlink(missing_ok=True)
        if where != "nowhere":
            folder = self.pathbin if where == "path" else self.wslbin
            (folder / "nvidia-smi").symlink_to(REPLAY_DIR / "nvidia-smi")


@pytest.fixture(scope="module")
def gpu_host(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu-scenarios")
    key = make_key(root / "id_ed25519")
    for name in ("pathbin", "wslbin", "overlay/wsl"):
        (root / name).mkdir(parents=True)
    (root / "overlay" / "wsl" / "lib").symlink_to(root / "wslbin")
    os.chmod(root, 0o755)  # the non-root login reads the replay's folders too
    mount = (f"mount -t overlay overlay -o lowerdir={shlex.quote(str(root / 'overlay'))}:/usr/lib /usr/lib")
    env = {"REPLAY_SCENARIO_FILE": str(root / "scenario"), "REPLAY_DATA": str(FIXTURES)}
    server = replay_sshd(root / "sshd", key, env=env, path=f"{root / 'pathbin'}:/usr/bin:/bin",
                         namespace_setup=mount)
    with server:
        host = Host(root, server, key)
        host.set("")
        yield host


@pytest.fixture
def host(gpu_host, isolated_home):
    (isolated_home / "known_hosts").write_text(gpu_host.server.known_hosts_line())
    profiles = isolated_home / "profiles" / "hosts"
    profiles.mkdir(parents=True)
    ssh = (f"ssh:\n  hostname: 127.0.0.1\n  port: {gpu_host.server.port}\n  identity_file: {gpu_host.key.path}\n"
           "  connect_timeout: 5\n")
    (profiles / "gpubox.yaml").write_text(ssh + "  user: root\nruntime: docker\ndefault_env: cuda\n")
    (profiles / "barebox.yaml").write_text(ssh + f"  user: root\nruntime: host\npython: {TORCH_PYTHON}\n"
                                           "default_env: cuda\n")
    (profiles / "nodocker.yaml").write_text(ssh + "  user: devenv-nodocker\nruntime: docker\ndefault_env: cuda\n")
    yield gpu_host
    pool.close_all()


def cli(*args: str):
    result = CliRunner().invoke(main, list(args))
    assert "Traceback" not in result.output, result.output
    assert result.exit_code != 70, result.output
    return result


def show(*args: str):
    r = cli(*args)
    print(f"\n$ devenv {' '.join(args)}  -> {r.exit_code}\n{r.output[-3000:]}")
    return r


SCENARIOS = ["", "no-driver", "mismatch", "lost", "zero", "hang", "na", "mig", "mixed", "driver-470", "driver-535",
             "rtx5090", "p100", "gtx750ti"]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_explore(host, scenario):
    host.set(scenario)
    show("check", "gpubox", "--json")
    show("check", "barebox")
    show("monitor", "barebox", "--once", "--json")


@pytest.mark.parametrize("scenario,where", [("", "wsl"), ("", "nowhere"), ("hang", "path")])
def test_explore2(host, scenario, where):
    host.set(scenario, where)
    show("check", "barebox")
    show("monitor", "barebox", "--once", "--json")


@pytest.mark.parametrize("scenario", ["", "mismatch"])
def test_explore3(host, scenario):
    host.set(scenario)
    show("up", "gpubox", "--detach")
    show("sanity", "barebox", "--only", "matmul")
    show("check", "nodocker")
