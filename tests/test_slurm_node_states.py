"""Node states as Slurm defines them, read from `scontrol show node --oneliner` recorded on the test cluster
while its nodes were drained, draining, down, failed and not responding (tests/fixtures/slurm/scontrol_nodes_*),
and judged by `check`: per node with the admin's reason, and never "can start now" when no node takes a job."""

from __future__ import annotations

from pathlib import Path

import pytest

from devenv.checks import cluster as cc
from devenv.cluster import slurm_text
from devenv.cluster.slurm_job import SlurmSettings

SLURM = Path(__file__).parent / "fixtures" / "slurm"


def nodes(name: str) -> list[slurm_text.Node]:
    return [slurm_text.node_from_record(r) for r in slurm_text.parse_records((SLURM / name).read_text())]


def judged(name: str, **settings):
    parts = slurm_text.summarize_partitions(
        slurm_text.parse_records((SLURM / "scontrol_partitions_cpu.txt").read_text()),
        slurm_text.parse_records((SLURM / name).read_text()))
    results = cc.judge_partitions(parts, SlurmSettings(partition="debug", **settings))
    by_id = {r.id: r for r in results}
    return by_id["slurm.request"], by_id["slurm.nodes"], by_id["slurm.partition.debug"]


def test_recorded_drained_and_draining_nodes_are_read_as_such_with_their_reasons():
    node1, node2 = nodes("scontrol_nodes_drained_and_draining.txt")
    assert (node1.base, node1.flags, node1.word, node1.usable) == ("IDLE", {"DRAIN"}, "drained", False)
    assert (node2.base, node2.flags, node2.word, node2.usable) == ("MIXED", {"DRAIN"}, "draining", False)
    assert node1.reason.startswith("disk replaced, back at 16:00 [root@")
    assert node2.describe().startswith("draining (mixed): kernel update")


def test_every_node_drained_is_no_can_start_now_and_names_each_node_and_reason():
    request, per_node, line = judged("scontrol_nodes_all_drained.txt")
    assert request.status == "warn" and "can start now" not in request.value
    assert "no node of partition debug can take a job now" in request.value
    assert "node1 drained: disk replaced, back at 16:00" in request.value
    assert "ReqNodeNotAvail" in request.remedy and "sinfo -R" in request.remedy
    assert request.details["usable_nodes"] == 0
    assert per_node.status == "warn" and "2 of 2 take no jobs" in per_node.value
    assert "node2 drained: kernel update" in per_node.value
    assert "2 drained" in line.value and "CPUs 0/4 free" in line.value


def test_a_draining_node_takes_no_new_job():
    request, per_node, _ = judged("scontrol_nodes_drained_and_draining.txt")
    assert request.status == "warn" and "no node of partition debug can take a job now" in request.value
    assert "node2 draining (mixed): kernel update" in per_node.value


def test_down_and_failed_nodes():
    node1, node2 = nodes("scontrol_nodes_down_and_fail.txt")
    assert (node1.word, node2.word) == ("down", "failed")
    request, per_node, _ = judged("scontrol_nodes_down_and_fail.txt")
    assert request.status == "warn"
    assert "node1 down: fan failure" in per_node.value and "node2 failed: ECC errors" in per_node.value


def test_a_node_not_responding_is_out_and_the_other_still_takes_the_job():
    node1, node2 = nodes("scontrol_nodes_not_responding.txt")
    assert (node1.word, node1.usable, node2.word, node2.usable) == ("not responding", False, "idle", True)
    request, per_node, _ = judged("scontrol_nodes_not_responding.txt")
    assert request.status == "pass" and "can start now" in request.value
    assert per_node.status == "warn" and "1 of 2 take no jobs: node1 not responding; node2 idle" in per_node.value
    request, _, _ = judged("scontrol_nodes_not_responding.txt", nodes=2)
    assert request.status == "warn" and "only 1 node(s) of partition debug can take jobs, 2 asked" in request.value


def test_healthy_nodes_are_listed_as_info():
    _, per_node, _ = judged("scontrol_nodes_cpu.txt")
    assert per_node.status == "info" and per_node.value == "node1 allocated; node2 mixed"


# Slurm's state strings beyond what the test cluster can be put into (power saving, reservations' flags,
# sinfo's suffixes): `man sinfo`, NODE STATE CODES; the flag names are those libslurm prints.
@pytest.mark.parametrize("state, word, usable, free", [
    ("IDLE+DRAIN", "drained", False, False),
    ("ALLOCATED+DRAIN", "draining", False, False),
    ("MIXED+DRAIN+COMPLETING", "draining", False, False),
    ("DOWN+DRAIN+NOT_RESPONDING", "down", False, False),
    ("DOWN*+DRAIN", "down", False, False),
    ("IDLE*", "not responding", False, False),
    ("MIXED+FAIL", "failing", False, False),
    ("IDLE+MAINTENANCE", "maint", False, False),
    ("IDLE+RESERVED", "reserved", False, False),
    ("IDLE+POWERED_DOWN", "powered down", True, False),
    ("IDLE~", "powered down", True, False),
    ("IDLE+POWERING_UP", "powering up", True, False),
    ("IDLE+POWERING_DOWN", "powering down", False, False),
    ("ALLOCATED", "allocated", True, False),
    ("MIXED", "mixed", True, True),
    ("IDLE", "idle", True, True),
    ("FUTURE", "future", False, False),
    ("drained", "drained", False, False),
    ("draining", "draining", False, False),
])
def test_state_strings(state, word, usable, free):
    base, flags = slurm_text.parse_node_state(state)
    node = slurm_text.Node("n1", base, flags, None)
    assert (node.word, node.usable, node.free) == (word, usable, free)


def test_a_powered_down_partition_warns_that_nodes_must_boot():
    part, = slurm_text.summarize_partitions(
        [{"PartitionName": "gpu", "State": "UP", "MaxTime": "1:00:00", "Default": "YES"}],
        [{"NodeName": "g1", "Partitions": "gpu", "State": "IDLE+POWERED_DOWN", "CPUTot": "8", "CPUAlloc": "0"}])
    request = next(r for r in cc.judge_partitions([part], SlurmSettings()) if r.id == "slurm.request")
    assert request.status == "warn" and "g1 must boot first" in request.value
