"""The check's health section on real H200 `nvidia-smi -q` records and edited copies carrying one fault each
(tests/fixtures/health/README.md; edited-* are made by make_edited.sh from the real ones)."""

from __future__ import annotations

from pathlib import Path

import pytest

from devenv.checks.health import judge_health, unhealthy
from devenv.checks.report import FAIL, INFO, PASS, WARN
from devenv.gpu.health import parse_health, parse_xids, same_gpu

FIX = Path(__file__).parent / "fixtures" / "health"
CLEAN_LOG = (FIX / "log-dmesg-clean.txt").read_text()


def read(name: str) -> str:
    return (FIX / name).read_text()


@pytest.mark.parametrize("record", ["h200-q-idle.txt", "h200-q-load.txt", "h200-q-load-cotenant.txt"])
def test_the_healthy_h200_passes(record):
    results = judge_health(read(record), 0, CLEAN_LOG)
    assert [r.status for r in results] == [PASS, PASS], [r.value for r in results]
    gpu, xid = results
    assert gpu.id == "gpu.0.health" and "ECC enabled, 0 uncorrectable" in gpu.value
    assert "PCIe Gen5 x16" in gpu.value and "persistence enabled" in gpu.value
    assert xid.value == "none in the kernel log since boot (dmesg)"
    assert not unhealthy(results)


def test_the_parse_reads_the_fields_that_matter():
    (gpu,) = parse_health(read("h200-q-load.txt"))
    assert (gpu.index, gpu.bus_id, gpu.name) == (0, "00000000:00:06.0", "NVIDIA H200")
    assert gpu.uuid == "GPU-7ec50cc1-d730-5a84-abe8-60c9a13767ef"
    assert (gpu.link_gen, gpu.link_gen_max, gpu.link_width, gpu.link_width_max) == (5, 5, 16, 16)
    assert (gpu.volatile_uncorrectable, gpu.aggregate_uncorrectable) == (0, 0)
    assert (gpu.remap_pending, gpu.remap_failure, gpu.retired_pending) == (False, False, None)  # H200: rows, not pages
    assert gpu.util_pct == 100 and gpu.slowdowns == () and gpu.persistence == "Enabled"


# (edited record, the finding's id, status, the exact field it names, unhealthy)
FAULTS = [
    ("edited-ecc-uncorrectable.txt", "gpu.0.health.ecc", FAIL, "ECC Errors > Volatile (uncorrectable): 2", True),
    ("edited-ecc-aggregate-only.txt", "gpu.0.health.ecc", WARN, "ECC Errors > Aggregate (uncorrectable): 1", False),
    ("edited-remap-pending.txt", "gpu.0.health.row-remap", FAIL, "Remapped Rows > Pending: Yes", True),
    ("edited-remap-failure.txt", "gpu.0.health.row-remap", FAIL, "Remapped Rows > Remapping Failure Occurred: Yes",
     True),
    ("edited-retired-pending.txt", "gpu.0.health.retired-pages", FAIL, "Retired Pages > Pending Page Blacklist: Yes",
     True),
    ("edited-pcie-gen3-x8-load.txt", "gpu.0.health.pcie", WARN,
     "PCI > GPU Link Info: Gen3 x8 of Gen5 x16 under load", False),
    ("edited-pcie-gen3-x8-idle.txt", "gpu.0.health.pcie", INFO,
     "PCI > GPU Link Info: Gen3 x8 of Gen5 x16 (idle: not judged)", False),
    ("edited-hw-power-brake-idle.txt", "gpu.0.health.clocks", FAIL,
     "Clocks Event Reasons: HW Power Brake Slowdown active on an idle GPU", True),
    ("edited-hw-thermal-load.txt", "gpu.0.health.clocks", WARN, "Clocks Event Reasons: HW Thermal Slowdown active",
     False),
    ("edited-persistence-off.txt", "gpu.0.health.persistence", WARN, "Persistence Mode: Disabled", False),
    ("edited-recovery-reset.txt", "gpu.0.health.recovery", FAIL, "GPU Recovery Action: Reset", True),
    ("edited-fields-lost.txt", "gpu.0.health.lost", FAIL, "Performance State: Unknown Error", True),
]


@pytest.mark.parametrize("record,finding,status,words,sick", FAULTS, ids=[f[0] for f in FAULTS])
def test_each_fault_gives_its_finding(record, finding, status, words, sick):
    results = judge_health(read(record), 0, CLEAN_LOG)
    found = [r for r in results if r.id == finding]
    assert found, [r.id for r in results]
    assert found[0].status == status and found[0].value == words
    assert found[0].details["field"] == words.split(": ")[0]
    assert found[0].remedy
    assert bool(unhealthy(results)) is sick
    has_pass = any(r.status == PASS and r.id == "gpu.0.health" for r in results)
    assert has_pass is (status == INFO)  # a PASS only beside information, never beside a finding


def test_the_pcie_link_is_judged_by_the_callers_load_when_it_knows():
    idle = read("edited-pcie-gen3-x8-idle.txt")
    (link,) = [r for r in judge_health(idle, 0, None, under_load=True) if r.id == "gpu.0.health.pcie"]
    assert link.status == WARN and "under load" in link.value


def test_both_lost_fields_are_named():
    lost = [r for r in judge_health(read("edited-fields-lost.txt"), 0, None) if r.id == "gpu.0.health.lost"]
    assert [r.details["field"] for r in lost] == ["Performance State", "Temperature > GPU Current Temp"]


def test_a_failing_nvidia_smi_q_says_why_and_a_lost_gpu_is_unhealthy():
    out = "Unable to determine the device handle for GPU 00000000:00:06.0: Unknown Error\n"
    (result,) = judge_health(out, 255, None)
    assert result.status == FAIL and "lost" in result.value and unhealthy([result])
    (missing,) = judge_health("", 127, None)
    assert missing.status != FAIL and "no NVIDIA driver" in missing.value


def test_an_unreadable_kernel_log_is_said_not_passed():
    results = judge_health(read("h200-q-idle.txt"), 0, read("log-dmesg-unreadable.txt"))
    xid = results[-1]
    assert xid.id == "gpu.xid" and xid.status == INFO
    assert xid.value == "not read: dmesg: read kernel buffer failed: Operation not permitted"
    assert "dmesg_restrict" in (xid.remedy or "") and xid.details["readable"] is False


def test_xid_79_on_this_gpu_is_unhealthy_and_named():
    results = judge_health(read("h200-q-idle.txt"), 0, read("edited-log-xid79.txt"))
    xid = results[-1]
    assert xid.status == FAIL and unhealthy(results) == [xid]
    assert "Xid 79 on GPU 0 (0000:00:06): GPU has fallen off the bus" in xid.value
    assert "codes 13, 79" in xid.value and "nvidia-smi -r -i 0" in (xid.remedy or "")


def test_an_application_xid_is_information_and_another_gpus_xid_is_not_ours():
    app = judge_health(read("h200-q-idle.txt"), 0, read("edited-log-xid13.txt"))[-1]
    assert app.status == INFO and "Xid 13" in app.value
    other = judge_health(read("h200-q-idle.txt"), 0, read("edited-log-xid94-other-gpu.txt"))[-1]
    assert other.status == PASS and "(journalctl)" in other.value


def test_xid_lines_parse_and_bus_ids_match_across_spellings():
    xids = parse_xids(read("edited-log-xid79.txt"))
    assert [(x.bus_id, x.code) for x in xids] == [("0000:00:06", 13), ("0000:00:06", 79)]
    assert same_gpu("0000:3b:00", "00000000:3B:00.0") and not same_gpu("0000:3b:00", "00000000:3C:00.0")


def test_only_the_runs_gpus_are_judged():
    assert judge_health(read("edited-remap-pending.txt"), 0, None, uuids=["GPU-other"]) == []
