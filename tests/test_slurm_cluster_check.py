"""`check` on a Slurm cluster: the pure judges fed Slurm's recorded answers from the test cluster
(tests/fixtures/slurm). GPU partitions are the same node records with a GPU GRES put in, since the test
cluster has no GPU (the GRES strings are Slurm's own forms, as parsed in test_slurm_text.py)."""

from __future__ import annotations

from pathlib import Path

from devenv.checks import cluster as cc
from devenv.checks.host import BatchOutput
from devenv.cluster import slurm_job, slurm_text
from devenv.cluster.slurm_job import SlurmSettings
from devenv.services.environments.slurm.check import parse_limits

SLURM = Path(__file__).parent / "fixtures" / "slurm"


def read(name: str) -> str:
    return (SLURM / name).read_text()


def partitions(gres: str | None = None, alloc: str | None = None):
    nodes = read("scontrol_nodes_cpu.txt")
    if gres:
        nodes = nodes.replace("Gres=(null)", f"Gres={gres}")
    if alloc:
        nodes = nodes.replace("AllocTRES=cpu=2", f"AllocTRES=cpu=2,{alloc}")
    return slurm_text.summarize_partitions(slurm_text.parse_records(read("scontrol_partitions_cpu.txt")),
                                           slurm_text.parse_records(nodes))


def request(results):
    return next(r for r in results if r.id == "slurm.request")


def test_cpu_partition_is_listed_and_a_cpu_job_fits():
    results = cc.judge_partitions(partitions(), SlurmSettings(partition="debug"))
    line = next(r for r in results if r.id == "slurm.partition.debug")
    assert line.title == "Partition debug (default)"
    assert "2 node(s)" in line.value and "CPUs 1/4 free" in line.value and "no GPUs" in line.value
    assert request(results).status == "pass"


def test_unknown_partition_fails_and_names_the_real_ones():
    check = request(cc.judge_partitions(partitions(), SlurmSettings(partition="gpu")))
    assert check.status == "fail"
    assert "'gpu' does not exist" in check.value and "debug*" in check.value


def test_gpus_asked_on_a_partition_without_gpus_fails_with_the_cpu_hint():
    check = request(cc.judge_partitions(partitions(), SlurmSettings(partition="debug", gpus_per_node=1)))
    assert check.status == "fail" and "has no GPUs" in check.value
    assert "gpus_per_node: 0" in check.remedy


def test_too_many_nodes_fails():
    check = request(cc.judge_partitions(partitions(), SlurmSettings(nodes=3)))
    assert check.status == "fail" and "3 node(s) asked, the partition has 2" in check.value


def test_gpu_partition_shows_free_total_and_types_and_warns_when_the_job_would_queue():
    parts = partitions(gres="gpu:h200:4(S:0-1)", alloc="gres/gpu=3")
    line = next(r for r in cc.judge_partitions(parts, SlurmSettings()) if r.id == "slurm.partition.debug")
    assert "GPUs 5/8 free (h200)" in line.value
    assert request(cc.judge_partitions(parts, SlurmSettings(gpus_per_node=2))).status == "pass"
    queued = request(cc.judge_partitions(parts, SlurmSettings(gpus_per_node=4, nodes=2)))
    assert queued.status == "warn" and "5 GPU(s) free now, 8 asked" in queued.value
    wrong_type = request(cc.judge_partitions(parts, SlurmSettings(gpus_per_node=1, gpu_type="a100")))
    assert wrong_type.status == "fail" and "has h200" in wrong_type.value


def test_limits_without_accounting_are_info_not_failure():
    out = read("sacctmgr_no_accounting.txt").rsplit("exit=", 1)
    accounting, rows, detail = parse_limits(BatchOutput("sacctmgr", out[0], "", int(out[1])))
    check = cc.judge_limits(accounting, rows, detail)
    assert check.status == "info" and "accounting_storage" in check.value


def test_limits_list_each_association():
    text = "devenv|lab|gpu|normal|gres/gpu=8|gres/gpu=4|10|20|1-00:00:00\n"
    check = cc.judge_limits(*parse_limits(BatchOutput("sacctmgr", text, "", 0)))
    assert check.status == "info"
    assert "lab/gpu (qos normal)" in check.value and "maxtres=gres/gpu=4" in check.value


def test_slurm_missing_on_the_login_node_fails():
    check = cc.judge_slurm(None, "sh: 1: sinfo: not found")
    assert check.status == "fail" and "sinfo: not found" in check.value
    assert cc.judge_slurm(slurm_text.parse_version(read("sinfo_version.txt"))).value == "Slurm 22.05.8"


def test_probe_job_refused_is_a_failure_and_a_busy_queue_a_warning():
    refused = cc.node_job_failed(BatchOutput("srun", "", read("srun_unknown_partition.txt"), 1), 60)
    assert refused.status == "fail" and "Invalid partition name specified" in refused.value
    busy = cc.node_job_failed(BatchOutput("srun", "", read("srun_immediate_busy.txt"), 1), 60)
    assert busy.status == "warn" and "no node free within 60 s" in busy.value


def test_containers_found_on_the_node_and_pyxis_on_the_login_node():
    out = BatchOutput("tools", "apptainer /usr/bin/apptainer apptainer version 1.3.4\n", "", 0)
    check = cc.judge_containers(out, pyxis=True)
    assert check.value == "pyxis (srun --container-image), apptainer apptainer version 1.3.4"
    assert "none found" in cc.judge_containers(BatchOutput("tools", "", "", 0), pyxis=False).value


def test_probe_command_asks_what_the_environment_job_asks_as_single_words():
    command = slurm_job.probe_command(SlurmSettings(partition="gpu", account="lab", gpus_per_node=2,
                                                    gpu_type="h200"), ["sh", "-c", "echo hi; id"], 30)
    assert command.startswith("srun --job-name=devenv-check --nodes=1 --ntasks=1 --time=00:03:00 "
                              "--immediate=30 --quiet --partition=gpu --account=lab --gres=gpu:h200:2 -- sh -c ")
    assert "'echo hi; id'" in command


def test_a_controller_that_does_not_answer_is_said_as_such():
    """Recorded on the test cluster with slurmctld stopped: scontrol's exit 1 and its words, which `check` took
    for a cluster without partitions ("partition 'debug' does not exist (partitions: none)")."""
    said = read("scontrol_partitions_controller_down.stderr.txt")
    down = cc.judge_controller(BatchOutput("scontrol --oneliner show partition", "", said, 1))
    assert down is not None and down.id == "slurm.controller" and down.status == "fail"
    assert "Unable to contact slurm controller (connect failure)" in down.value and "slurmctld" in down.remedy
    assert cc.judge_controller(BatchOutput("scontrol", read("scontrol_partitions_cpu.txt"), "", 0)) is None


def test_without_munged_the_cause_is_named_not_slurms_last_line():
    """Recorded on the test cluster with munged stopped: the last line is only "Protocol authentication error"."""
    said = read("scontrol_partitions_munge_down.stderr.txt")
    down = cc.judge_controller(BatchOutput("scontrol --oneliner show partition", "", said, 1))
    assert down is not None and "Munge encode failed" in down.value and "munged is not running" in down.remedy
    assert not down.value.count("scontrol: error:")


# --- the health section of the compute node (checks/health.health_section), on the recorded H200 outputs ----

HEALTH = Path(__file__).parent / "fixtures" / "health"


def test_a_node_without_a_gpu_says_no_gpu_not_healthy():
    from devenv.checks.health import health_section

    said = "no NVIDIA driver: nvidia-smi is not installed on this host"
    [result] = cc.on_node(health_section(said, 127, "@log dmesg\n", False, "none", "node1"), "node1")
    assert (result.id, result.status, result.title) == ("gpu.health", "no-gpu", "GPU health (node1)")
    assert result.value == "no GPU on node1: no GPU health to judge" and result.details == {"unhealthy": False,
                                                                                            "node": "node1"}


def test_a_node_with_a_sick_gpu_is_unhealthy_and_named():
    """The recorded H200 `nvidia-smi -q` with a pending row remap (an edited copy: edited-remap-pending.txt) on the
    node: FAIL and unhealthy for an environment that wants the GPU, WARN (spare) for one that asks for none."""
    from devenv.checks.health import health_section, sick_gpus
    from devenv.checks.report import CheckReport

    sick = (HEALTH / "edited-remap-pending.txt").read_text()
    log = (HEALTH / "log-dmesg-clean.txt").read_text()
    found = cc.on_node(health_section(sick, 0, log, True, "all", "gpu-a01"), "gpu-a01")
    report = CheckReport("cluster", "cuda", found)
    assert report.unhealthy and set(sick_gpus(found)) == {0}
    finding = report.unhealthy[0]
    assert finding.title == "GPU 0 health (gpu-a01)" and finding.details["node"] == "gpu-a01"
    assert "Pending" in finding.details["field"] and finding.remedy
    spared = health_section(sick, 0, log, True, "none", "gpu-a01")
    assert not CheckReport("cluster", "cpu", spared).unhealthy
    assert any(r.status == "warn" and r.details.get("skipped") for r in spared)
    healthy = health_section((HEALTH / "h200-q-idle.txt").read_text(), 0, log, True, "all", "gpu-a01")
    assert not CheckReport("cluster", "cuda", healthy).unhealthy
    assert any(r.id == "gpu.0.health" and r.status == "pass" for r in healthy)
