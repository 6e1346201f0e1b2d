"""GPU-host scenarios through the real CLI over one real sshd (docs/gpu-scenarios.md holds the table).

The host's nvidia-smi is tests/replay/nvidia-smi (real H200 recordings; each scenario's output and where its
format comes from is in that script's docstring), switched per test through REPLAY_SCENARIO_FILE, so the module
needs one sshd. The sshd runs in a private mount namespace where /usr/lib is an overlay that adds
/usr/lib/wsl/lib (a symlink to a folder of ours): "nvidia-smi only in WSL's folder, not on PATH" is real for
its sessions and nothing changes on this machine. Every command must end with its documented exit code, one
error or verdict with the reason, no traceback, no exit 70, no hang.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner
from monitor_helpers import REPLAY_DIR, replay_sshd
from sshd_fixture import make_key

from devenv.cli import main
from devenv.gpu import nvsmi
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
    envs = isolated_home / "profiles" / "envs"
    envs.mkdir(parents=True)
    cuda = (REPLAY_DIR.parent.parent / "profiles" / "envs" / "cuda.yaml").read_text()
    (envs / "huge.yaml").write_text(cuda.replace("image_size_gb: 16", "image_size_gb: 100000"))
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


def check_json(name: str = "barebox", *args: str):
    result = cli("check", name, "--json", *args)
    return result, {c["id"]: c for c in json.loads(result.stdout)["checks"]}


def monitor_json(name: str = "barebox"):
    result = cli("monitor", name, "--once", "--json")
    [snap] = json.loads(result.stdout[:result.stdout.rindex("}") + 1])["hosts"]
    return result, snap


# scenario, where nvidia-smi is, the driver check (status, words), monitor (state, exit code)
BROKEN = [
    ("no-driver", "path", "cannot talk to the NVIDIA driver", "no-gpu", 0),
    ("mismatch", "path", "kernel module and the user-space driver libraries differ", "error", 1),
    ("lost", "path", "the GPU at PCI 0000:00:07.0 is lost", "error", 1),
    ("zero", "path", "the NVIDIA driver sees no GPU", "no-gpu", 0),
    ("", "nowhere", "nvidia-smi is not installed", "no-gpu", 0),
    ("hang", "path", "did not answer within 2 s", "error", 1),  # nvsmi.ANSWER_S made 2 s for the test
]


@pytest.mark.parametrize("scenario,where,words,state,monitor_code", BROKEN, ids=[f"{b[0] or 'absent'}" for b in BROKEN])
def test_a_broken_driver_is_one_clear_failure_everywhere(host, scenario, where, words, state, monitor_code,
                                                         monkeypatch):
    monkeypatch.setattr(nvsmi, "ANSWER_S", 2)  # how long devenv waits for nvidia-smi (10 s by default)
    host.set(scenario, where)
    result, checks = check_json()
    assert result.exit_code == 1
    driver = checks["nvidia.driver"]
    assert driver["status"] == "fail" and words in driver["value"], driver
    assert driver["remedy"] and "run nvidia-smi on the host to see the full error" not in driver["remedy"]
    assert not [c for c in checks if c.startswith("gpu.")]  # no GPU rows invented
    text = cli("check", "barebox")
    assert text.exit_code == 1 and words in text.output and "NOT ready" in text.output

    result, snap = monitor_json()
    assert snap["state"] == state and words in snap["message"] and snap["hint"], snap
    assert result.exit_code == monitor_code, result.output

    up = cli("up", "gpubox", "--detach")
    assert up.exit_code == 1, up.output
    assert "gpubox is not ready for 'cuda': NVIDIA driver (" in up.output and words in up.output
    assert "Hint:" in up.output and "Traceback" not in up.output

    sanity = cli("sanity", "barebox", "--only", "matmul", "--no-save")
    assert sanity.exit_code == 4, sanity.output  # no GPU proven, with the host's reason
    assert "nothing about a GPU was proven" in sanity.output and words in sanity.output, sanity.output


def test_nvidia_smi_only_in_wsl_folder_is_found(host):
    host.set("", "wsl")  # /usr/lib/wsl/lib/nvidia-smi, not on the session's PATH (WSL2 outside a login shell)
    result, checks = check_json()
    assert checks["nvidia.driver"]["status"] == "pass", checks["nvidia.driver"]
    assert "NVIDIA H200" in checks["gpu.0"]["value"]
    result, snap = monitor_json()
    assert snap["state"] == "ok" and snap["gpus"][0]["name"] == "NVIDIA H200" and result.exit_code == 0


# scenario -> (check id, status, words in its value), the check's exit code
JUDGED = [
    ("na", "gpu.0", "warn", "unknown model, memory N/A, compute capability N/A", None),
    ("na", "compat.*torch-arch", "warn", "the GPU's compute capability is not known", None),
    ("mixed", "gpu.mixed", "warn", "NVIDIA A100-SXM4-80GB, NVIDIA H200", 0),
    ("mixed", "gpu.1", "pass", "NVIDIA A100-SXM4-80GB, 80 GiB, compute capability 8.0", 0),
    ("driver-470", "compat.*driver", "fail", "below 525.60.13, the minimum for CUDA 12.x", 1),
    ("driver-535", "compat.*driver", "warn", "minor-version compatibility", 0),
    ("rtx5090", "compat.*torch-arch", "pass", "carries sm_120 SASS", None),
    ("p100", "compat.*torch-arch", "fail", "has no SASS for sm_60", 1),
    ("gtx750ti", "compat.*torch-arch", "fail", "has no SASS for sm_50", 1),
    ("mig", "gpu.0.mig", "warn", "MIG mode is on", None),
]


@pytest.mark.parametrize("scenario,check_id,status,words,code", JUDGED, ids=[f"{j[0]}-{j[1]}" for j in JUDGED])
def test_unusual_gpus_and_drivers_are_judged(host, scenario, check_id, status, words, code):
    host.set(scenario)
    result, checks = check_json()
    found = [c for cid, c in checks.items() if fnmatch.fnmatch(cid, check_id)]
    assert found, sorted(checks)
    assert any(c["status"] == status and words in c["value"] for c in found), found
    if code is not None:
        assert result.exit_code == code, result.output
    result, snap = monitor_json()
    assert snap["state"] == "ok" and result.exit_code == 0, snap


def test_a_disk_smaller_than_the_image_stops_up_before_anything_is_made(host):
    host.set("")
    result, checks = check_json("gpubox", "--env", "huge")
    assert checks["disk"]["status"] == "fail" and "image needs ~100000 GB" in checks["disk"]["value"]
    up = cli("up", "gpubox", "--env", "huge", "--detach")
    assert up.exit_code == 1 and "Free disk" in up.output and "Hint:" in up.output, up.output
    assert "Building" not in up.output and "Creating" not in up.output


def test_a_dead_docker_daemon_stops_up_with_the_start_hint(host):
    host.set("")
    docker = host.pathbin / "docker"  # the real docker client, pointed at a socket nobody serves
    docker.write_text(f"#!/bin/sh\nDOCKER_HOST=unix://{host.root}/dead.sock exec /usr/bin/docker \"$@\"\n")
    docker.chmod(0o755)
    try:
        result, checks = check_json("gpubox")
        assert result.exit_code == 1
        daemon = checks.get("docker.daemon") or checks.get("engine.daemon")
        assert daemon and daemon["status"] == "fail", sorted(checks)
        up = cli("up", "gpubox", "--detach")
        assert up.exit_code == 1 and "Cannot connect to the Docker daemon" in up.output, up.output
        assert "Hint: start the daemon" in up.output
    finally:
        docker.unlink()


def test_a_login_without_docker_access_stops_up(use_testhost):
    up = cli("up", "testbox-nodocker", "--detach")
    assert up.exit_code == 1, up.output
    assert "may not use Docker: permission denied" in up.output and "usermod -aG docker" in up.output
