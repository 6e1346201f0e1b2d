"""Docker and podman behind one runtime: which engine answered, how each is asked for GPUs, and what `check`
says about an engine and its CDI specs. Fed real outputs recorded on the test host (tests/fixtures/engines)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from devenv.checks import engine as ec
from devenv.checks.report import FAIL, PASS, SKIP, WARN
from devenv.env import engines
from devenv.env import spec as envspec
from devenv.env.spec import ContainerRequest
from devenv.runtimes.docker_runtime import _device_requests, podman_create_spec

FIX = Path(__file__).parent / "fixtures" / "engines"


@dataclass
class Out:
    stdout: str = ""
    stderr: str = ""
    exit_code: int = 0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


MISSING = Out("", "sh: 1: podman: not found", 127)


def test_identify_tells_podman_from_docker_by_their_own_version_answers():
    podman = engines.identify(json.loads((FIX / "podman-4.3.1-api-version.json").read_text()))
    docker = engines.identify(json.loads((FIX / "docker-20.10-api-version.json").read_text()))
    assert (podman.name, podman.version, podman.api_version) == ("podman", "4.3.1", "1.41")
    assert docker.name == "docker" and docker.version.startswith("20.10") and docker.api_version == "1.41"


def test_dial_commands_and_gpu_requests_per_engine():
    assert engines.dial_command("podman") == "podman system dial-stdio"
    assert engines.dial_command("docker") == "docker system dial-stdio"
    assert "docker system dial-stdio" in engines.dial_command("auto") and "podman" in engines.dial_command("auto")
    assert engines.gpu_request_kind("podman", "auto") == "cdi"
    assert engines.gpu_request_kind("podman", "toolkit") == "cdi"   # podman has no toolkit path
    assert engines.gpu_request_kind("docker", "auto") == "toolkit"
    assert engines.gpu_request_kind("docker", "cdi") == "cdi"
    assert engines.cdi_device_names("all") == ["nvidia.com/gpu=all"]
    assert engines.cdi_device_names("0,2") == ["nvidia.com/gpu=0", "nvidia.com/gpu=2"]
    assert engines.cdi_device_names("none") == []


def test_docker_device_requests_toolkit_and_cdi():
    [toolkit] = _device_requests("all", "toolkit")
    assert toolkit["Count"] == -1 and toolkit["Capabilities"] == [["gpu", "compute", "utility"]]
    [cdi] = _device_requests("1", "cdi")
    assert cdi["Driver"] == "cdi" and cdi["DeviceIDs"] == ["nvidia.com/gpu=1"]
    assert _device_requests("none", "cdi") == []


def request(**overrides) -> ContainerRequest:
    fields = dict(name="devenv-a-b", image="img:tag", labels={"org.devenv.env": "b"}, environment={"X": "1"},
                  ports={8888: 40001, 22: 40002}, volumes={"devenv-a-b-workspace": "/workspace"}, shm_size="2g",
                  gpus="0,1", hostname="b", ulimits={"memlock": (-1, -1), "nofile": (1048576, 1048576)})
    fields.update(overrides)
    return ContainerRequest(**fields)


def test_podman_spec_is_the_container_the_docker_path_makes_with_cdi_devices():
    spec = podman_create_spec(request())
    assert spec["devices"] == [{"path": "nvidia.com/gpu=0"}, {"path": "nvidia.com/gpu=1"}]
    assert all(m["host_ip"] == "127.0.0.1" for m in spec["portmappings"])   # never 0.0.0.0
    assert {(m["container_port"], m["host_port"]) for m in spec["portmappings"]} == {(8888, 40001), (22, 40002)}
    assert spec["volumes"] == [{"Name": "devenv-a-b-workspace", "Dest": "/workspace"}]
    assert spec["shm_size"] == 2 * 1024**3 and spec["init"] is True and spec["restart_policy"] == "unless-stopped"
    memlock = next(r for r in spec["r_limits"] if r["type"] == "memlock")
    assert memlock["soft"] == memlock["hard"] == 2**64 - 1           # podman wants RLIM_INFINITY unsigned
    assert "r_limits" not in podman_create_spec(request(ulimits={}))  # none asked: the engine's defaults apply
    assert podman_create_spec(request(gpus="none"))["devices"] == []


def test_choose_engine_auto_prefers_docker_then_podman():
    podman_info = Out((FIX / "podman-4.3.1-info_rootful.json").read_text())
    docker_version = Out('{"Client":{"Version":"28.2.2"},"Server":{"Version":"20.10.24","ApiVersion":"1.41"}}')
    docker_info = Out((FIX / "docker-20.10-info.json").read_text())
    docker = ec.choose_engine("auto", docker_version, docker_info, podman_info)
    assert docker.name == "docker" and docker.docker_info and docker.results[0].status == PASS
    podman = ec.choose_engine("auto", Out("", "docker: not found", 127), MISSING, podman_info)
    assert podman.name == "podman"
    found, network = podman.results
    assert found.status == PASS and found.value.startswith("podman 4.3.1 (rootful)")
    assert network.id == "engine.network"
    assert ec.choose_engine("podman", docker_version, docker_info, podman_info).name == "podman"
    none = ec.choose_engine("auto", Out("", "", 127), MISSING, MISSING)
    assert none.name is None and none.results[0].status == FAIL and "neither docker nor podman" in none.results[0].value


def test_podman_says_whether_its_environments_are_out_of_other_containers_reach():
    """Recorded on the test host before and after slirp4netns was installed: without it podman's CNI bridge lets
    siblings through, which `check` now says (it said nothing)."""
    without = ec.choose_engine("podman", MISSING, MISSING, Out((FIX / "podman-4.3.1-info_rootful.json").read_text()))
    with_slirp = ec.choose_engine("podman", MISSING, MISSING,
                                  Out((FIX / "podman-4.3.1-info_rootful_slirp4netns.json").read_text()))
    warn, ok = without.results[-1], with_slirp.results[-1]
    assert warn.id == ok.id == "engine.network"
    assert warn.status == WARN and "other containers" in warn.value and "apt install slirp4netns" in warn.remedy
    assert ok.status == PASS and "/usr/bin/slirp4netns" in ok.value
    assert without.name == with_slirp.name == "podman"       # a warning, not a refusal


def test_podman_without_its_api_service_says_how_to_start_it():
    info = json.loads((FIX / "podman-4.3.1-info_rootful.json").read_text())
    info["host"]["remoteSocket"]["exists"] = False
    info["host"]["security"]["rootless"] = True
    [result] = ec.judge_podman(Out(json.dumps(info)))
    assert result.status == FAIL and "systemctl --user enable --now podman.socket" in result.remedy


NVIDIA_SPEC = """\
cdiVersion: "0.3.0"
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
- name: all
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
containerEdits:
  deviceNodes:
  - path: /dev/nvidiactl
"""
OTHER_SPEC = '{"cdiVersion": "0.5.0", "kind": "vendor.example/fpga", "devices": [{"name": "f0", "containerEdits": {}}]}'


def dump(**files: str) -> Out:
    return Out("".join(f"{ec._SPEC_MARK}{path}\n{text}\n" for path, text in files.items()))


def test_cdi_specs_parse_yaml_json_and_broken_files():
    specs = ec.parse_cdi_specs(dump(**{"/etc/cdi/nvidia.yaml": NVIDIA_SPEC, "/etc/cdi/fpga.json": OTHER_SPEC,
                                       "/etc/cdi/bad.yaml": "kind: [unclosed"}).stdout)
    assert [(s.path, s.kind, s.devices) for s in specs[:2]] == [
        ("/etc/cdi/nvidia.yaml", "nvidia.com/gpu", ("0", "all")),
        ("/etc/cdi/fpga.json", "vendor.example/fpga", ("f0",))]
    assert specs[2].error


@pytest.mark.parametrize("files, gpus, status, words", [
    ({"/etc/cdi/nvidia.yaml": NVIDIA_SPEC}, "all", PASS, "lists nvidia.com/gpu=all"),
    ({"/etc/cdi/nvidia.yaml": NVIDIA_SPEC}, "0", PASS, "lists nvidia.com/gpu=0"),
    ({"/etc/cdi/nvidia.yaml": NVIDIA_SPEC}, "0,1", FAIL, "lacks nvidia.com/gpu=1"),
    ({}, "all", FAIL, "no CDI spec lists nvidia.com/gpu"),
    ({"/etc/cdi/fpga.json": OTHER_SPEC}, "all", FAIL, "vendor.example/fpga=f0"),
])
def test_cdi_judge_present_missing_and_other_devices(files, gpus, status, words):
    result = ec.judge_gpu_access("podman", "auto", gpus, Out(), dump(**files), None, has_gpu=True, wants_gpu=True)
    assert result.status == status and words in result.value
    if status == FAIL:
        assert "nvidia-ctk cdi generate" in result.remedy


def test_gpu_access_skips_without_gpu_and_docker_cdi_needs_cdi_enabled():
    specs = dump(**{"/etc/cdi/nvidia.yaml": NVIDIA_SPEC})
    assert ec.judge_gpu_access("podman", "auto", "all", Out(), specs, None, False, True).status == SKIP
    off = ec.judge_gpu_access("docker", "cdi", "all", Out(), specs, {"CDISpecDirs": []}, True, True)
    assert off.status == FAIL and "features" in off.remedy
    on = ec.judge_gpu_access("docker", "cdi", "all", Out(), specs, {"CDISpecDirs": ["/etc/cdi"]}, True, True)
    assert on.status == PASS
    # Docker without the toolkit but with CDI on and a GPU spec: the remedy names gpu_devices: cdi.
    toolkit = ec.judge_gpu_access("docker", "auto", "all", Out("dockerd_path /usr/bin\n"), specs,
                                  {"CDISpecDirs": ["/etc/cdi"], "Runtimes": {"runc": {}}}, True, True)
    assert toolkit.status == FAIL and "gpu_devices: cdi" in toolkit.remedy


def test_image_inspect_of_podman_pretty_array_is_read():
    from devenv.checks.host import image_facts

    text = json.dumps([{"Id": "abc", "Size": 2_000_000_000,
                        "Config": {"Labels": {"org.devenv.cuda": "12.8", "org.devenv.torch": "2.11.0+cu128"}}}],
                      indent=5)
    facts = image_facts(Out(text))
    assert facts == {"size_gb": 2.0, "cuda": "12.8", "torch": "2.11.0+cu128", "require_cuda": None}


def test_a_refused_ulimit_is_named_in_runc_and_crun_wording():
    from devenv.runtimes.docker_runtime import refused_limit

    runc = ("runc: runc create failed: unable to start container process: error during container init: error setting "
            "rlimits for ready process: error setting rlimit type 7: operation not permitted: OCI permission denied")
    crun = "crun: setrlimit `RLIMIT_NOFILE`: Operation not permitted: OCI permission denied"  # seen on the H200
    assert refused_limit(runc) == "nofile"
    assert refused_limit(crun) == "nofile"
    assert refused_limit("crun: setrlimit `RLIMIT_MEMLOCK`: Operation not permitted") == "memlock"
    assert refused_limit("port is already allocated") is None


@pytest.mark.parametrize("engine, installed, asked", [
    ("auto", {"docker", "podman"}, False),   # docker is what auto picks: podman's answer is never read
    ("auto", {"podman"}, True),
    ("auto", set(), False),                  # exit 127 either way: "neither is installed"
    ("docker", {"docker", "podman"}, False),
    ("podman", {"docker", "podman"}, True),
])
def test_podman_info_is_asked_only_where_choose_engine_reads_it(tmp_path, engine, installed, asked):
    """`podman info` is the batch's slowest probe; the probe runs as the batch runs it (sh, stub CLIs on PATH)."""
    import subprocess

    calls = tmp_path / "calls"
    for name in installed:
        stub = tmp_path / name
        stub.write_text(f'#!/bin/sh\necho "{name} $*" >> {calls}\necho "{{}}"\n')
        stub.chmod(0o755)
    done = subprocess.run(["/bin/sh", "-c", ec.podman_info_probe(engine)], capture_output=True, text=True,
                          env={"PATH": str(tmp_path)})  # the probe uses only builtins
    called = calls.read_text() if calls.exists() else ""
    assert ("podman info" in called) == asked
    if "podman" not in installed:
        assert done.returncode in (0, 127) and ("podman" not in called)
    if engine == "auto" and not installed:
        assert done.returncode == 127


def test_podman_with_slirp4netns_puts_the_environment_on_no_bridge():
    """podman's CNI bridges forward between each other: with slirp4netns the container joins none, and the
    published 127.0.0.1 ports go through slirp4netns's port handler (tests/integration/.../test_env_network.py)."""
    spec = podman_create_spec(request(network=envspec.NETWORK_SLIRP))
    assert spec["netns"] == {"nsmode": "slirp4netns"} and "Networks" not in spec
    assert spec["network_options"] == {"slirp4netns": ["port_handler=slirp4netns", "allow_host_loopback=false"]}
    assert all(m["host_ip"] == "127.0.0.1" for m in spec["portmappings"])
    bridged = podman_create_spec(request(network="devenv-a-b-net"))
    assert bridged["netns"] == {"nsmode": "bridge"} and bridged["Networks"] == {"devenv-a-b-net": {}}
