"""Slurm's own output, parsed (L0). The inputs are recorded from the test host's real Slurm 22.05 (squeue -o,
scontrol --oneliner, sbatch --parsable, sinfo --version, sacctmgr without accounting): tests/fixtures/slurm."""

from __future__ import annotations

from pathlib import Path

import pytest

from devenv.cluster import slurm_text

# Not `from conftest import ...`: in a whole-suite run `conftest` may already name another folder's conftest.
SLURM = Path(__file__).parent / "fixtures" / "slurm"


def read(name: str) -> str:
    return (SLURM / name).read_text()


def test_running_and_ended_jobs_from_squeue():
    jobs = {j.job_id: j for j in slurm_text.parse_jobs(read("squeue_running_and_ended.txt"))}
    env = jobs["6"]
    assert (env.name, env.state, env.phase, env.nodes, env.time_limit) == (
        "devenv-slurmdev-cpu", "RUNNING", "running", "node1", "10:00")
    assert env.comment == "devenv:b684c6186329aef6" and env.reason is None and env.node_count == 1
    both = jobs["1"]
    assert (both.phase, both.nodes, both.node_count) == ("ended", "node[1-2]", 2)
    # a job the partition can never run, as squeue showed it after it was cancelled
    assert jobs["2"].phase == "ended" and jobs["2"].reason == "PartitionConfig" and jobs["2"].nodes is None


def test_pending_job_with_its_reason_and_estimated_start():
    jobs = {j.name: j for j in slurm_text.parse_jobs(read("squeue_pending.txt"))}
    later = jobs["devenv-rec-c"]
    assert later.phase == "pending" and later.reason == "BeginTime" and later.hopeless is None
    assert later.pending_text() == ("BeginTime (its start time has not come yet), estimated start "
                                    "2026-12-01T12:17:37")
    assert jobs["devenv-rec-a"].phase == "running" and jobs["devenv-rec-a"].comment == "devenv:abc"


def test_hopeless_reasons_are_named_and_waiting_ones_are_not():
    line = "2|wrap|PENDING|PartitionConfig||UNLIMITED|N/A|UNLIMITED|5|debug|(null)"   # squeue, job 2, live
    job, = slurm_text.parse_jobs(line)
    assert job.hopeless == "the partition cannot run a job of this shape" and job.start is None
    assert job.pending_text().endswith("no estimated start yet")
    waiting, = slurm_text.parse_jobs("3|wrap|PENDING|Priority||UNLIMITED|N/A|UNLIMITED|1|debug|(null)")
    assert waiting.hopeless is None and waiting.pending_text().startswith("Priority (jobs of higher priority")


def test_cancelled_job_from_squeue_says_why_it_ended():
    job, = slurm_text.parse_jobs(read("squeue_cancelled.txt"))
    assert job.phase == "ended" and job.end_text() == "CANCELLED: it was cancelled (scancel)"


def test_a_comment_with_the_separator_stays_whole_and_warnings_are_skipped():
    text = ("squeue: warning: something\n"
            "12|devenv-a-b|RUNNING|None|node2|1:00|2026-12-01T11:00:00|2:00|1|gpu|devenv:abc|extra|bits\n")
    job, = slurm_text.parse_jobs(text)
    assert job.comment == "devenv:abc|extra|bits" and job.partition == "gpu"


def test_scontrol_records_keep_values_with_spaces():
    node, = [r for r in slurm_text.parse_records(read("scontrol_nodes_cpu.txt")) if r["NodeName"] == "node1"]
    assert node["OS"].startswith("Linux ") and "SMP" in node["OS"]
    assert node["CPUTot"] == "2" and node["Gres"] == "(null)" and node["Partitions"] == "debug"


def test_job_from_scontrol_when_squeue_no_longer_lists_it():
    record, = slurm_text.parse_records(read("scontrol_job_cancelled.txt"))
    job = slurm_text.job_from_record(record)
    assert (job.job_id, job.name, job.state, job.phase, job.time_limit) == (
        "7", "devenv-rec-pending", "CANCELLED", "ended", "00:05:00")
    assert job.comment == "devenv:abc" and job.node_count == 2


def test_partitions_from_the_cpu_cluster_have_no_gpus():
    parts = slurm_text.summarize_partitions(slurm_text.parse_records(read("scontrol_partitions_cpu.txt")),
                                            slurm_text.parse_records(read("scontrol_nodes_cpu.txt")))
    debug, = parts
    assert debug.name == "debug" and debug.default and debug.state == "UP"
    assert debug.nodes == ["node1", "node2"] and debug.cpus_total == 4
    assert debug.gpus_total == 0 and debug.gpus_free == 0 and debug.gpu_types == set()


@pytest.mark.parametrize("gres, expected", [
    # forms from Slurm's gres.conf / scontrol documentation
    ("gpu:h100:8(S:0-1)", [("gpu", "h100", 8)]),
    ("gpu:4", [("gpu", None, 4)]),
    ("gpu:a100:4(S:0),gpu:v100:2(S:1)", [("gpu", "a100", 4), ("gpu", "v100", 2)]),
    ("gpu", [("gpu", None, 1)]),
    ("(null)", []),
])
def test_gres_strings(gres, expected):
    assert [(g.name, g.type, g.count) for g in slurm_text.parse_gres(gres)] == expected


def test_gpus_in_use_from_alloc_tres():
    assert slurm_text.tres_gpus("cpu=8,mem=64G,gres/gpu=3,gres/gpu:a100=3") == 3
    assert slurm_text.tres_gpus("cpu=2") == 0 and slurm_text.tres_gpus("") == 0


def test_gpu_partition_free_and_total_counts_only_usable_nodes():
    nodes = [{"NodeName": "g1", "Partitions": "gpu", "State": "MIXED", "CPUTot": "64", "CPUAlloc": "16",
              "Gres": "gpu:h100:8(S:0-1)", "AllocTRES": "cpu=16,gres/gpu=2"},
             {"NodeName": "g2", "Partitions": "gpu", "State": "DOWN+DRAIN", "CPUTot": "64", "CPUAlloc": "0",
              "Gres": "gpu:h100:8(S:0-1)", "AllocTRES": ""}]
    part, = slurm_text.summarize_partitions([{"PartitionName": "gpu", "State": "UP", "MaxTime": "2-00:00:00"}],
                                            nodes)
    assert (part.gpus_total, part.gpus_free, part.gpu_types) == (16, 6, {"h100"})
    assert part.node_states == {"mixed": 1, "down": 1}


def test_sbatch_parsable_output():
    assert slurm_text.parse_sbatch("42\n") == "42"
    assert slurm_text.parse_sbatch("42;cluster-a\n") == "42"
    with pytest.raises(ValueError):
        slurm_text.parse_sbatch("sbatch: error: Batch job submission failed\n")


def test_versions():
    assert slurm_text.parse_version(read("sinfo_version.txt")) == "22.05.8"
    assert slurm_text.parse_version("slurm 23.11.4\n") == "23.11.4"
    assert slurm_text.parse_version("bash: sinfo: command not found") is None


def test_a_job_still_completing_after_its_time_limit_is_reported_as_a_time_limit():
    # What CI's squeue showed for a time-limited job a moment after the limit (stop 19's failed run): the
    # state is still COMPLETING, the reason already says TimeLimit
    line = "5|devenv-stime-lim-825d|COMPLETING|TimeLimit|node1|0:00|2026-12-02T03:29:10|2:00|1|debug|devenv:x"
    job, = slurm_text.parse_jobs(line)
    assert job.phase == "ending" and job.outcome == "TIMEOUT"
    assert job.end_text() == "TIMEOUT: it reached its time limit (Slurm still says COMPLETING, reason TimeLimit)"


def test_a_job_ending_for_no_known_reason_says_it_is_ending_not_that_it_ended_somehow():
    job, = slurm_text.parse_jobs("6|devenv-a|COMPLETING|None|node1|0:00|N/A|2:00|1|debug|devenv:x")
    assert job.outcome == "COMPLETING"
    assert job.end_text() == "COMPLETING: it is ending (Slurm is stopping its processes)"
    ended, = slurm_text.parse_jobs("7|devenv-a|TIMEOUT|TimeLimit|node1|0:00|N/A|2:00|1|debug|devenv:x")
    assert ended.outcome == "TIMEOUT" and ended.end_text() == "TIMEOUT: it reached its time limit (TimeLimit)"
