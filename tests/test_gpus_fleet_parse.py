"""`devenv gpus`' look at one host (gpu.fleet, L0) over the replayed nvidia-smi (tests/replay: a real H200
recording), run by a real shell on this machine: the rows, who uses a GPU, driver and CUDA, and the words for a
host without a driver and for one whose driver is broken."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from devenv.gpu import fleet

REPLAY = Path(__file__).parent / "replay"
UUID0 = "GPU-35c64b04-2d7b-9f48-2883-3f9d4b9d7f59"


def look(tmp_path: Path, **env: str) -> fleet.HostGpus:
    environ = {**os.environ, "PATH": f"{REPLAY}:/usr/bin:/bin", "REPLAY_GPUS": "2", "REPLAY_TICK": "30", **env}
    done = subprocess.run(["bash", "-c", fleet.look_script()], capture_output=True, text=True, env=environ,
                          timeout=60)
    return fleet.parse_look("gpu1", done.stdout + done.stderr, done.returncode,
                            container_names={"0123456789ab": "devenv-bob-cuda"})


def test_a_busy_and_a_free_gpu(tmp_path):
    apps = tmp_path / "apps.csv"
    apps.write_text(f"{os.getpid()}, python3, 1130, {UUID0}\n")
    host = look(tmp_path, REPLAY_APPS=str(apps))
    assert host.state == "ok" and host.driver and host.cuda and host.free_count == 1
    g0, g1 = host.gpus
    assert g0.sku and "H200" in g0.sku and g0.mem_total_mib and g0.mem_total_mib > 100_000
    assert len(g0.users) == 1 and g0.users[0].endswith(f"python3 pid {os.getpid()}") and not g0.free
    assert g1.free and g1.users == () and g1.health is None
    rows = fleet.table_rows([host])
    assert [r[1] for r in rows] == ["0", "1"] and rows[1][-1] == "free" and rows[0][5] == "-"
    assert rows[0][6] == f"{host.driver} / {host.cuda}"


@pytest.mark.parametrize("scenario,state,words", [
    ("no-driver", "no-gpu", "cannot talk to the NVIDIA driver"),
    ("zero", "no-gpu", "the NVIDIA driver sees no GPU"),
    ("mismatch", "error", "kernel module and the user-space driver libraries differ"),
])
def test_hosts_without_usable_gpus_say_why(tmp_path, scenario, state, words):
    host = look(tmp_path, REPLAY_SCENARIO=scenario)
    assert host.state == state and words in (host.reason or "") and host.gpus == () and host.hint
    [row] = fleet.table_rows([host])
    assert row[0] == "gpu1" and row[2] == {"no-gpu": "no GPU", "error": "ERROR"}[state] and words in row[-1]


def test_a_user_in_a_container_is_named_by_the_container():
    sharer = fleet.Sharer(0, UUID0, 812, "bob", "python3", 1130, "0123456789abcdef")
    assert fleet.describe_user(sharer, {"0123456789ab": "devenv-bob-cuda"}) == "bob (devenv-bob-cuda) python3 pid 812"
    unnamed = fleet.Sharer(0, UUID0, None, util_pct=85)
    assert fleet.describe_user(unnamed) == "someone (85% util, no process seen)"


def test_the_health_column_is_the_health_gates_word(monkeypatch):
    """`devenv gpus` over a replayed host whose GPU 1 has a remap pending (an edited copy of the real H200
    `nvidia-smi -q`, tests/fixtures/health/README.md): the health gate's UNHEALTHY on GPU 1 with its finding, ok
    on GPU 0, and the placement no longer counts GPU 1 as free."""
    from devenv.gpu import placement
    from devenv.remote.local import LocalConnection
    from devenv.services import fleet as fleet_service

    monkeypatch.setenv("PATH", f"{REPLAY}:/usr/bin:/bin")
    monkeypatch.setenv("REPLAY_GPUS", "2")
    monkeypatch.setenv("REPLAY_TICK", "30")
    monkeypatch.setenv("REPLAY_HEALTH", "edited-remap-pending.txt")
    monkeypatch.setenv("REPLAY_HEALTH_GPUS", "1")
    host = fleet_service.look_host("gpu1", LocalConnection())
    g0, g1 = host.gpus
    assert (g0.health, g0.health_finding) == ("ok", None)
    assert g1.health == "UNHEALTHY" and g1.health_finding and "Pending" in g1.health_finding
    assert [r[5] for r in fleet.table_rows([host])] == ["ok", "UNHEALTHY"]
    candidate = placement.Candidate(host, None)
    assert 1 not in [g.index for g in candidate.usable_free]   # GPU 0's load is the recording's moment
    with pytest.raises(placement.NoHostFits, match="gpu1"):
        placement.place("@lab", [candidate], need=2)
