"""The environment spec (L0): what decides reattach vs recreate, the names and labels on the host."""

from __future__ import annotations

import json

from devenv.config.profiles import BuildSpec, EnvProfile
from devenv.env import spec as envspec


def profile(**overrides) -> EnvProfile:
    fields = dict(name="cpu", source="test", image="devenv/pytorch:cpu", build=BuildSpec("pytorch.Dockerfile", {}),
                  ports={"jupyter": 8888, "ssh": 2222}, volumes={"workspace": "/workspace"}, shm_size="2g",
                  gpus="none")
    fields.update(overrides)
    return EnvProfile(**fields)


def test_same_inputs_same_hash_and_any_change_shows_in_the_diff():
    a = envspec.desired_spec(profile(), "sha256:aaaa", "SHA256:key")
    assert envspec.spec_hash(a) == envspec.spec_hash(envspec.desired_spec(profile(), "sha256:aaaa", "SHA256:key"))
    b = envspec.desired_spec(profile(shm_size="16g"), "sha256:bbbb", "SHA256:key")
    assert envspec.spec_hash(a) != envspec.spec_hash(b)
    assert envspec.diff_specs(a, b) == ["image_id: sha256:aaaa -> sha256:bbbb", "shm_size: 2g -> 16g"]


def test_a_changed_key_is_a_changed_spec_only_when_sshd_runs():
    with_sshd = profile()
    assert envspec.spec_hash(envspec.desired_spec(with_sshd, "i", "k1")) != \
        envspec.spec_hash(envspec.desired_spec(with_sshd, "i", "k2"))
    no_sshd = profile(sshd=False)
    assert envspec.desired_spec(no_sshd, "i", "k1") == envspec.desired_spec(no_sshd, "i", "k2")
    assert envspec.desired_spec(no_sshd, "i", "k1")["ports"] == {"jupyter": 8888}


def test_labels_carry_the_spec_so_the_host_is_the_truth():
    spec = envspec.desired_spec(profile(env={"HF_HOME": "/workspace/hf"}), "sha256:aaaa", "SHA256:key")
    labels = envspec.labels(spec, "alice", "box", "0.1.0")
    assert labels[envspec.MANAGED] == "1" and labels[envspec.OWNER] == "alice" and labels[envspec.ENV] == "cpu"
    assert envspec.spec_from_labels(labels) == spec
    assert labels[envspec.SPEC_HASH] == envspec.spec_hash(spec)
    assert json.loads(labels[envspec.PORTS]) == {"jupyter": 8888, "ssh": 2222}
    assert envspec.spec_from_labels({}) is None and envspec.spec_from_labels({envspec.SPEC: "{bad"}) is None


def test_container_request_publishes_preferred_ports_unless_told_to_take_free_ones():
    spec = envspec.desired_spec(profile(gpus="all"), "sha256:aaaa", "SHA256:key")
    req = envspec.container_request(spec, "alice", "box", "0.1.0")
    assert req.name == envspec.container_name("alice", "cpu") and req.image == "sha256:aaaa"
    assert req.name.startswith("devenv-alice-cpu-")
    assert req.ports == {8888: 8888, 22: 2222}
    assert req.volumes == {envspec.volume_name("alice", "cpu", "workspace"): "/workspace"}
    kept = envspec.container_request(spec, "alice", "box", "0.1.0", volume_names={"workspace": "old-volume"})
    assert kept.volumes == {"old-volume": "/workspace"}
    assert req.environment["DEVENV_JUPYTER"] == "1" and req.environment["DEVENV_WORKSPACE"] == "/workspace"
    assert req.gpus == "all" and req.ulimits["memlock"] == (-1, -1)
    freed = envspec.container_request(spec, "alice", "box", "0.1.0", any_port={"jupyter"})
    assert freed.ports == {8888: None, 22: 2222}


def test_profile_env_cannot_override_devenv_switches():
    spec = envspec.desired_spec(profile(env={"DEVENV_JUPYTER": "0", "X": "1"}), "i", "k")
    env = envspec.container_request(spec, "o", "h", "v").environment
    assert env["DEVENV_JUPYTER"] == "1" and env["X"] == "1"


def test_owner_is_safe_for_docker_names(monkeypatch):
    monkeypatch.setenv("DEVENV_OWNER", "Jane Doe@Lab")
    assert envspec.owner() == "jane-doe-lab"


def test_names_of_different_owner_and_env_pairs_never_collide():
    # owner `a` + env `b-c` and owner `a-b` + env `c` once shared devenv-a-b-c (issue 14)
    assert envspec.container_name("a", "b-c") != envspec.container_name("a-b", "c")
    assert envspec.volume_name("a", "b-c", "workspace") != envspec.volume_name("a-b", "c", "workspace")
    assert envspec.volume_name("a", "b", "c-workspace") != envspec.volume_name("a", "b-c", "workspace")
    assert envspec.container_name("a", "b-c").startswith("devenv-a-b-c-")
