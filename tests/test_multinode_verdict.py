"""The multi-node sanity verdict, fed what scripts/multinode.py wrote in a real run on the test cluster
(2 Slurm nodes on one machine, gloo on CPUs: tests/fixtures/slurm/multinode_cpu_2nodes_*.json). The GPU cases
change that record's fields the way a GPU run writes them (backend nccl, node facts from sysfs), since no GPU
cluster is reachable from CI; the thresholds come from sanity/data/interconnects.yaml with their sources."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from devenv.sanity import multinode as mn

SLURM = Path(__file__).parent / "fixtures" / "slurm"


def record(name: str) -> dict:
    return json.loads((SLURM / f"multinode_cpu_2nodes_{name}.json").read_text())


def by_id(verdict, check_id):
    return next(c for c in verdict.checks if c.id == check_id)


def gpu_run(busbw_gbs: float, ib_rate: str | None = "400 Gb/sec (4X NDR)", tokens_n: float = 1.8e6) -> tuple:
    multi, single = record("multi"), record("single")
    multi["backend"] = "nccl"
    for i, node in enumerate(multi["nodes"]):
        node["machine_id"] = f"machine-{i}"
        node["gpus"] = ["NVIDIA H200"] * 8
        node["ib"] = [{"device": "mlx5_0", "port": "1", "rate": ib_rate, "state": "4: ACTIVE",
                       "link_layer": "InfiniBand"}] if ib_rate else []
        node["nics"] = [{"name": "eth0", "state": "up", "speed_mbps": 100000}]
    for row in multi["busbw"]:
        row["busbw_gbs"] = busbw_gbs
        row["algbw_gbs"] = busbw_gbs
    multi["ddp"]["tokens_per_s"] = tokens_n
    single["ddp"]["tokens_per_s"] = 1e6
    return multi, single


def test_the_real_cpu_run_passes_and_says_what_it_did_not_prove():
    verdict = mn.judge(record("multi"), record("single"), 2)
    assert verdict.status == "pass"
    assert by_id(verdict, "multinode.allreduce").status == "pass"
    assert by_id(verdict, "multinode.ddp").status == "pass"
    assert verdict.link.kind == "loopback"
    busbw = by_id(verdict, "multinode.busbw")
    assert busbw.status == "info" and "not judged" in busbw.value
    assert by_id(verdict, "multinode.scaling").status == "info"
    assert any(line.startswith("CPU only: no GPU interconnect was tested") for line in verdict.not_proven)
    assert any("share one machine" in line for line in verdict.not_proven)


def test_wrong_sums_fail():
    multi = record("multi")
    multi["allreduce"].update(ok=False, random_sum=False)
    verdict = mn.judge(multi, record("single"), 2)
    assert verdict.status == "fail" and by_id(verdict, "multinode.allreduce").status == "fail"


def test_replicas_that_drift_apart_fail():
    multi = record("multi")
    multi["ddp"]["replicas_agree"] = False
    assert by_id(mn.judge(multi, record("single"), 2), "multinode.ddp").status == "fail"


def test_fewer_nodes_than_asked_fail():
    multi = record("multi")
    multi["nodes"] = multi["nodes"][:1]
    assert by_id(mn.judge(multi, record("single"), 2), "multinode.ranks").status == "fail"


def test_no_result_is_a_failure_with_the_reason():
    verdict = mn.judge(None, None, 2, "job 9 ended (TIMEOUT) without a multi-node result")
    assert verdict.status == "fail" and "TIMEOUT" in verdict.checks[0].value


def test_infiniband_busbw_is_judged_against_the_port_rate_with_its_source():
    good = mn.judge(*gpu_run(42.0), 2)
    check = by_id(good, "multinode.busbw")
    assert good.link.kind == "infiniband" and good.link.gbs == 50.0
    assert check.status == "pass" and "84% of 50 GB/s nominal" in check.value and "sysfs" in check.value
    assert not any("CPU only" in line for line in good.not_proven)
    slow = by_id(mn.judge(*gpu_run(15.0), 2), "multinode.busbw")
    assert slow.status == "warn" and "NET/IB" in slow.remedy
    broken = by_id(mn.judge(*gpu_run(4.0), 2), "multinode.busbw")
    assert broken.status == "fail"


def test_without_infiniband_the_path_is_ethernet_at_the_nic_speed():
    verdict = mn.judge(*gpu_run(10.0, ib_rate=None), 2)
    assert verdict.link.kind == "ethernet" and verdict.link.gbs == 12.5
    assert by_id(verdict, "multinode.busbw").status == "pass"


def test_scaling_efficiency_is_judged_between_machines():
    assert by_id(mn.judge(*gpu_run(42.0, tokens_n=1.8e6), 2), "multinode.scaling").status == "pass"   # 90%
    poor = by_id(mn.judge(*gpu_run(42.0, tokens_n=0.6e6), 2), "multinode.scaling")                    # 30%
    assert poor.status == "fail" and "30%" in poor.value


def test_one_node_with_nvlink_is_judged_against_nvlink4():
    multi, single = gpu_run(380.0)
    multi["nodes"] = multi["nodes"][:1]
    multi["nodes"][0]["nvlink"] = 18
    verdict = mn.judge(multi, single, 1)
    assert verdict.link.kind == "nvlink4" and verdict.link.gbs == 450
    assert by_id(verdict, "multinode.busbw").status == "pass"


def test_every_threshold_has_a_source():
    data = mn.table()
    assert data["rule"]["source"] and data["scaling"]["source"]
    for name, link in data["links"].items():
        assert link.get("source"), name


def test_the_record_is_not_changed_by_judging():
    multi = record("multi")
    before = copy.deepcopy(multi)
    mn.judge(multi, record("single"), 2)
    assert multi == before


def h200(phase: str) -> dict:
    """A real run on one H200 (2026-12-02, the device machine, torch 2.11 + CUDA 13.0, NCCL 2.28.9): the script
    started by torchrun by hand with one rank (benchmarks/gpu/multi_gpu_proof.sh)."""
    return json.loads((SLURM / f"multinode_nccl_h200_1gpu_{phase}.json").read_text())


def test_one_rank_on_one_gpu_passes_what_it_ran_and_judges_no_link():
    verdict = mn.judge(h200("multi"), h200("single"), 1)
    assert verdict.status == "pass", [(c.id, c.status, c.value) for c in verdict.checks]
    assert by_id(verdict, "multinode.allreduce").status == "pass"
    assert by_id(verdict, "multinode.ddp").status == "pass"
    busbw = by_id(verdict, "multinode.busbw")
    assert busbw.status == "skip" and "one rank" in busbw.value        # 0 GB/s by the formula, not a slow link
    assert by_id(verdict, "multinode.scaling").status == "skip"        # 1 node vs the same node is no scaling
    assert any("no interconnect was tested" in line for line in verdict.not_proven)


def h200_through_slurm(phase: str) -> dict:
    """A real `devenv sanity h200slurm --nodes 1` on the H200 machine (2026-12-02): one-node Slurm with gres/gpu,
    NCCL, one rank (docs/gpu-proof/slurm-gpu/sanity.json, its two phases)."""
    return json.loads((SLURM / f"multinode_nccl_h200_slurm_1gpu_{phase}.json").read_text())


def test_one_rank_through_slurm_names_no_interconnect_it_never_crossed():
    # The recorded verdict said "interconnect: PCIe 4.0 x16 ... GPUs talk over PCIe (gen 4 assumed)", with the
    # PCI-SIG threshold as its source, for a run whose all-reduce had one rank (and an H200, which is not gen 4).
    verdict = mn.judge(h200_through_slurm("multi"), h200_through_slurm("single"), 1)
    assert verdict.status == "pass"
    link = verdict.to_dict()["interconnect"]
    assert link["kind"] == "none" and link["gbs"] is None and link["source"] == "", link
    assert "one rank" in link["name"]
    assert verdict.not_proven == ["one rank: no interconnect was tested (it takes two GPUs or two nodes)"]
