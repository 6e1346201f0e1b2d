"""The environment's own network in `up`'s decisions (issue 14), against the in-memory runtime: made before the
container and named in its request, found again by its labels, removed by `down`; an environment made before
(on the engine's shared bridge, its spec without `network`) is shown as changed and recreated on confirmation."""

from __future__ import annotations

import json

import pytest
from memory_runtime import MemoryRuntime
from test_up_decisions import ENV, HOST, NAME, OWNER, Key, Recorder, backend, labels_for

from devenv.env import spec as envspec
from devenv.errors import DevenvError
from devenv.services.environments.contract import UpOptions

NETWORK = envspec.network_name(OWNER, ENV.name)


def test_up_makes_the_network_first_and_the_container_joins_it_and_down_removes_it():
    runtime = MemoryRuntime()
    result = backend(runtime).up(ENV, Key(), events=Recorder(), options=UpOptions())
    assert runtime.did("ensure_network") == [f"ensure_network {NETWORK}"]
    assert runtime.calls.index(f"ensure_network {NETWORK}") < runtime.calls.index(f"create {NAME}")
    assert runtime._requested[result.status.container].network == NETWORK
    labels = runtime.networks[NETWORK]
    assert (labels[envspec.OWNER], labels[envspec.ENV], labels[envspec.ROLE]) == (OWNER, ENV.name, "network")

    removed = backend(runtime).down(ENV.name)
    assert removed.networks == [NETWORK] and runtime.networks == {}


def test_a_network_found_by_its_labels_is_reused_whatever_its_name():
    runtime = MemoryRuntime()
    runtime.networks["made-by-an-older-devenv"] = {envspec.MANAGED: "1", envspec.OWNER: OWNER,
                                                   envspec.ENV: ENV.name, envspec.ROLE: "network"}
    result = backend(runtime).up(ENV, Key(), events=Recorder(), options=UpOptions())
    assert runtime._requested[result.status.container].network == "made-by-an-older-devenv"
    assert list(runtime.networks) == ["made-by-an-older-devenv"]


def test_an_environment_made_on_the_shared_bridge_is_shown_changed_and_recreated_on_confirmation():
    runtime = MemoryRuntime(images={ENV.image: "sha256:img"})
    old = labels_for("sha256:img")
    spec = json.loads(old[envspec.SPEC])
    del spec["network"]  # what devenv wrote before environments had networks of their own
    old = envspec.labels(spec, OWNER, HOST.name, "old")
    cid = runtime.add_container(NAME, "running", old)
    events = Recorder(answer=False)
    with pytest.raises(DevenvError, match="differs from its profile"):
        backend(runtime).up(ENV, Key(), events=events, options=UpOptions())
    assert "network: (none) -> own" in events.questions[0][1]
    result = backend(runtime).up(ENV, Key(), events=Recorder(answer=True), options=UpOptions())
    assert result.action == "recreated" and runtime.did("remove") == [f"remove {cid}"]
    assert runtime._requested[result.status.container].network == NETWORK


class BridgelessRuntime(MemoryRuntime):
    """An engine that isolates environments without a bridge (podman with slirp4netns)."""

    def bridgeless_network(self) -> str:
        return envspec.NETWORK_SLIRP


def test_an_engine_that_isolates_without_a_bridge_gets_no_network_made():
    runtime = BridgelessRuntime()
    events = Recorder()
    result = backend(runtime).up(ENV, Key(), events=events, options=UpOptions())
    assert runtime.did("ensure_network") == [] and runtime.networks == {}
    assert runtime._requested[result.status.container].network == envspec.NETWORK_SLIRP
    assert any("slirp4netns" in step for step in events.steps), events.steps
