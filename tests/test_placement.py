"""`up @group`'s choice of host (gpu.placement, L0): enough free GPUs, the image there, then the least loaded;
every host passed over has its reason; no host fits: one message with each host's reason."""

from __future__ import annotations

import pytest

from devenv.gpu.fleet import GpuRow, HostGpus, down
from devenv.gpu.placement import Candidate, NoHostFits, gpus_needed, place


def gpu(index: int, util: int = 0, used: int = 0, users: tuple[str, ...] = (), health: str | None = None) -> GpuRow:
    return GpuRow(index, "NVIDIA H200", used, 143771, util, users, health)


def host(name: str, *gpus: GpuRow, image: bool | None = True) -> Candidate:
    return Candidate(HostGpus(name, "ok", tuple(gpus), "570.1", "12.8"), image, "img:1")


BUSY = ("bob (devenv-bob-cuda) python3 pid 812",)


def test_gpus_needed_from_every_spelling():
    assert [gpus_needed(g) for g in ("free:2", "0,1,3", "all", "none")] == [2, 3, 1, 0]


def test_enough_free_gpus_wins_over_image_and_load():
    one_free = host("a", gpu(0, 90, 1000, BUSY), gpu(1))
    two_free = host("b", gpu(0, 50), gpu(1, 50), image=False)
    chosen = place("@lab", [one_free, two_free], need=2)
    assert chosen.host == "b" and chosen.why.startswith("b: the only host that fits: 2 of 2 GPUs free (2 needed)")
    assert dict(chosen.passed_over) == {"a": f"1 of 2 GPUs free, 2 needed (GPU 0: {BUSY[0]})"}


def test_image_present_preferred_then_least_loaded():
    loaded_with_image = host("a", gpu(0, 60, 50000), gpu(1))
    idle_without = host("b", gpu(0), gpu(1), image=False)
    idle_with = host("c", gpu(0, 5), gpu(1))
    chosen = place("@lab", [loaded_with_image, idle_without, idle_with], need=1)
    assert chosen.host == "c" and "has img:1" in chosen.why
    over = dict(chosen.passed_over)
    assert over["b"] == "fits, but lacks img:1 (c has it)"
    assert over["a"].startswith("fits, but c is less loaded (2 of 2 GPUs free (1 needed), mean GPU utilisation 30%")


def test_ties_say_so_and_hosts_needing_no_image_count_as_having_it():
    chosen = place("@lab", [host("b", gpu(0)), host("a", gpu(0), image=None)], need=1)
    assert chosen.host == "a" and dict(chosen.passed_over) == {"b": "fits as well; a comes first by name"}


def test_gpu_less_hosts_fit_an_environment_without_gpus_and_down_hosts_never():
    cpu = Candidate(HostGpus("box", "no-gpu", reason="no NVIDIA driver"), True, "img:1")
    gone = Candidate(down("gone", "cannot connect to gone: connection refused"), None, "img:1")
    chosen = place("@lab", [gone, cpu], need=0)
    assert chosen.host == "box" and dict(chosen.passed_over) == {
        "gone": "not reachable: cannot connect to gone: connection refused"}


def test_no_host_fits_names_every_host():
    cpu = Candidate(HostGpus("box", "no-gpu", reason="no NVIDIA driver"), True, "img:1")
    broken = Candidate(HostGpus("wedged", "error", reason="nvidia-smi did not answer within 10 s"), True)
    busy = host("a", gpu(0, 99, 9000, BUSY))
    with pytest.raises(NoHostFits) as caught:
        place("@lab", [cpu, broken, busy], need=1)
    message = caught.value.message
    assert message.startswith("no host of @lab can take it (1 free GPU needed): ")
    assert "box: no GPU (no NVIDIA driver)" in message
    assert "wedged: its GPUs do not answer: nvidia-smi did not answer within 10 s" in message
    assert f"a: 0 of 1 GPU free, 1 needed (GPU 0: {BUSY[0]})" in message
    assert caught.value.exit_code == 1 and "devenv gpus @lab" in (caught.value.hint or "")


def test_a_gpu_the_health_gate_marked_is_not_counted_free():
    marked = host("a", gpu(0, health="failing: Xid 79"), gpu(1))
    with pytest.raises(NoHostFits) as caught:
        place("@lab", [marked], need=2)
    assert "a: 1 of 2 GPUs free, 2 needed (GPU 0: failing: Xid 79)" in caught.value.message
    assert place("@lab", [marked, host("b", gpu(0, 5, health="ok"))], need=1).host == "a"  # its GPU 1 counts
