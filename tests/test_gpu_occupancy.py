"""The pure parts of shared-GPU handling: one occupancy frame parsed, a run's own processes told from others
(on the host and inside a container, by ancestry), GPUs free or busy, the pick of N free ones, the spellings
of `gpus:`, and the verdict that does not judge speed on a shared GPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from devenv.gpu import choose
from devenv.gpu.occupancy import RunIdentity, describe_gpu, foreign, parse_occupancy
from devenv.sanity.verdict import BUSY, FAIL, NOT_JUDGED, PASS, judge_report

FIX = Path(__file__).parent / "fixtures"
U0, U1 = "GPU-42db3584-48dc-5258-e66c-9c73d1c5245e", "GPU-42db3584-48dc-5258-e66c-9c73d1c52401"
CID = "3f1c2a9b8d7e" + "0" * 52


def frame(apps: str, util0: int = 100, mem0: int = 1139, extra: str = "") -> str:
    return (f"@gpus 0\n0, {U0}, {mem0}, 143771, {util0}\n1, {U1}, 0, 143771, 0\n@apps 0\n{apps}"
            f"@user 732 root\n@user 900 alice\n@cgroup 900 0::/system.slice/docker-{CID}.scope\n"
            f"@chain 732 732/732 700/700 1/1\n@chain 900 900/57 880/42 800/800\n{extra}@end\n")


def recorded_app() -> str:
    return (FIX / "nvidia-smi" / "compute-apps_busy.csv").read_text()  # real: 732, python3, 1130, GPU-42db...


def test_a_frame_names_processes_users_containers_and_ancestry():
    occ = parse_occupancy(frame(recorded_app() + f"900, python3, 2048, {U1}\n"), 1.0)
    assert [(g.index, g.util_pct, g.mem_used_mib) for g in occ.gpus] == [(0, 100, 1139), (1, 0, 0)]
    [p, q] = occ.processes
    assert (p.pid, p.user, p.name, p.used_mib, p.gpu_uuid, p.container) == (732, "root", "python3", 1130, U0, None)
    assert (q.user, q.container) == ("alice", CID[:12])
    assert occ.chains[900] == ((900, 57), (880, 42), (800, 800))


def test_no_driver_is_an_error_not_a_gpu():
    occ = parse_occupancy("@gpus 9\nNVIDIA-SMI has failed because it couldn't communicate\n@apps 9\n@end\n", 1.0)
    assert occ.gpus == () and "couldn't communicate" in occ.error


def test_the_runs_own_pid_tree_does_not_count_on_the_host_nor_in_a_container():
    occ = parse_occupancy(frame(recorded_app() + f"900, python3, 2048, {U1}\n"), 1.0)
    # on the host: the run is pid 700, parent of 732
    assert list(foreign([occ], RunIdentity(700))) == [U1]
    # in the container: the run's pid there is 42 (host pid 880), parent of 900
    others = foreign([occ], RunIdentity(42, CID))
    assert list(others) == [U0] and others[U0][0].pid == 732
    # the same inner pid in ANOTHER container is someone else
    assert set(foreign([occ], RunIdentity(42, "a" * 64))) == {U0, U1}


def test_sharer_words_match_the_issue():
    occ = parse_occupancy(frame(recorded_app()), 1.0)
    others = foreign([occ], RunIdentity(5))
    assert describe_gpu(0, others[U0]) == "GPU 0 was shared with pid 732 (root, python3, 1.1 GiB, 100% util)"


def test_a_busy_gpu_with_no_visible_process_counts_before_the_run():
    occ = parse_occupancy(frame(""), 1.0)
    [s] = foreign([occ], RunIdentity(5))[U0]
    assert s.pid is None and s.describe() == "a process not visible from here (100% util)"


def test_gpu_states_and_the_pick_of_free_gpus():
    occ = parse_occupancy(frame(recorded_app(), util0=100), 1.0)
    states = choose.gpu_states(occ)
    assert [s.free for s in states] == [False, True]
    assert states[0].describe() == "GPU 0 is busy with pid 732 (root, python3, 1.1 GiB, 100% util)"
    assert choose.choose(states, 1, host="h200").indices == (1,)
    with pytest.raises(choose.NotEnoughFreeGpus) as e:
        choose.choose(states, 2, host="h200")
    assert e.value.exit_code == 1
    assert e.value.message == ("2 free GPUs asked for, but only 1 of 2 on h200 is free: GPU 0 is busy with pid 732 "
                               "(root, python3, 1.1 GiB, 100% util)")
    assert "`--gpus 1`" in e.value.hint and "--allow-busy" in e.value.hint
    taken = choose.choose(states, 2, host="h200", allow_busy=True)
    assert taken.indices == (0, 1) and [s.index for s in taken.busy_taken] == [0]
    with pytest.raises(choose.NotEnoughFreeGpus, match="3 GPUs were asked for, but h200 has 2 GPUs"):
        choose.choose(states, 3, host="h200", allow_busy=True)


def test_least_used_free_gpu_first():
    text = f"@gpus 0\n0, {U0}, 900, 143771, 0\n1, {U1}, 0, 143771, 0\n@apps 0\n@end\n"
    assert choose.choose(choose.gpu_states(parse_occupancy(text, 1.0)), 1).indices == (1,)


@pytest.mark.parametrize("text,canonical", [
    ("all", "all"), ("none", "none"), ("2", "free:2"), ("0,1", "0,1"), ("device=1", "1"), ("3,", "3"),
    ("free:4", "free:4")])
def test_gpus_spellings(text, canonical):
    assert choose.parse_gpus(text) == canonical


@pytest.mark.parametrize("text", ["0", "two", "1,1", "-1", "device="])
def test_bad_gpus_spellings(text):
    with pytest.raises(ValueError):
        choose.parse_gpus(text)


def recorded_report() -> dict:
    lines = [json.loads(x) for x in (FIX / "sanity" / "h200-quick.jsonl").read_text().splitlines() if x.strip()]
    return next(e for e in lines if e.get("event") == "report")


def test_verdict_on_a_recorded_h200_run_with_a_shared_gpu_is_busy_not_fail():
    report = recorded_report()
    assert judge_report(report).status == PASS
    who = "GPU 0 was shared with pid 820 (root, python3, 1.1 GiB, 100% util)"
    v = judge_report(report, shared={0: who})
    assert v.status == BUSY and v.summary.startswith(f"{who}: speed not judged")
    rates = [c for c in v.checks if c.name.endswith(": rate")]
    assert rates and all(c.status == NOT_JUDGED and c.measured is not None and who in c.reason for c in rates)
    assert all(c.status == PASS for c in v.checks if c.name.endswith(": accuracy"))
    assert v.shared == (who,) and v.to_dict()["shared"] == [who]
    judged = judge_report(report, shared={0: who}, allow_busy=True)
    assert judged.status == PASS and "(--allow-busy)" in judged.summary and judged.allow_busy


def test_a_wrong_result_on_a_shared_gpu_still_fails():
    report = recorded_report()
    for r in report["results"]:
        if r.get("check") == "matmul_bf16":
            r["rel_err_vs_fp64"] = 0.5
    v = judge_report(report, shared={0: "GPU 0 was shared with pid 820 (root, python3)"})
    assert v.status == FAIL and "speed not judged" in v.summary
    assert any(c.status == FAIL and c.name == "matmul bf16: accuracy" for c in v.checks)


def test_busy_exit_code_ranks_after_no_gpu_and_before_a_failure_over_a_group():
    from devenv.cli.common import worst_exit_code

    assert worst_exit_code([0, 1, 5]) == 5 and worst_exit_code([5, 4]) == 4 and worst_exit_code([5, 3]) == 3
    assert worst_exit_code([0, 5]) == 5 and worst_exit_code([0, 0]) == 0


def test_the_monitor_marks_other_users_and_other_environments():
    from devenv.gpu.occupancy import whose
    from devenv.gpu.sample import ProcessSample, parse_apps_frame

    frame = parse_apps_frame(["@apps 0", f"732, python3, 1130, {U0}", "@me alice", "@user 732 root"])
    assert frame.me == "alice"
    [p] = frame.processes
    assert whose(p, frame.me, "alice") == "other user"
    assert whose(p, "root", "alice") is None
    mine = ProcessSample(1, "python3", 1, U0, "alice", "devenv-alice-cuda")
    theirs = ProcessSample(2, "python3", 1, U0, "bob", "devenv-bob-cuda")
    assert whose(mine, "alice", "alice") is None
    assert whose(theirs, "alice", "alice") == "other user, other env"


@pytest.mark.parametrize("line,gpus", [("gpus: 2", "free:2"), ("gpus: [1]", "1"), ("gpus: [0, 1]", "0,1"),
                                       ("gpus: device=3", "3"), ("gpus: all", "all")])
def test_env_profile_gpus(line, gpus):
    from devenv.config.profiles import parse_env

    assert parse_env(f"image: x\n{line}\n", "e", "e.yaml").gpus == gpus


def test_env_profile_zero_gpus_is_refused_with_its_line():
    from devenv.config.profiles import parse_env
    from devenv.errors import ProfileError

    with pytest.raises(ProfileError) as e:
        parse_env("image: x\ngpus: 0\n", "e", "e.yaml")
    assert "gpus" in e.value.message and "write 'none'" in e.value.message


def test_a_count_becomes_the_picked_gpus_in_the_container_and_its_label_not_the_spec_hash():
    from devenv.config.profiles import parse_env
    from devenv.env import spec as envspec

    spec = envspec.desired_spec(parse_env("image: x\ngpus: 1\n", "e", "e.yaml"), "sha256:1", "")
    request = envspec.container_request(spec, "t", "h", "0", chosen_gpus="3")
    assert request.gpus == "3" and request.labels[envspec.GPUS] == "3"
    assert request.labels[envspec.SPEC_HASH] == envspec.spec_hash(spec) and spec["gpus"] == "free:1"
    assert envspec.container_request(spec, "t", "h", "0", chosen_gpus="5").labels[envspec.SPEC_HASH] == \
        request.labels[envspec.SPEC_HASH]


def test_the_pid_loop_both_scripts_share_takes_the_first_field_of_app_lines_only():
    """gpu.sample.apps_pids_script, as the occupancy frame and the monitor's process stream run it (sh), on a
    compute-apps listing (pid, process_name, used_memory, gpu_uuid) with nvidia-smi's error lines in it."""
    import subprocess

    from devenv.gpu.sample import apps_pids_script

    listing = ("820, python3, 1126, GPU-aaaa\nNo running processes found\n"
               "Failed to initialize NVML: Unknown Error\n9031, python, 20, GPU-bbbb\n9032, python, 8, GPU-aaaa\n")
    for indent, uuids in (("", False), ("  ", False), ("  ", True)):
        script = f"out='{listing}'\n{apps_pids_script(indent, uuids=uuids)}\necho \"[$pids] [${{uuids:-}}]\""
        done = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True)
        expected = "[820 9031 9032] [GPU-aaaa,GPU-bbbb]" if uuids else "[820 9031 9032] []"
        assert done.stdout.strip() == expected, (indent, uuids, done.stdout, done.stderr)


def test_wait_free_says_it_waited_even_when_the_first_look_outlasts_the_wait(monkeypatch):
    # a slow host: the first look itself takes longer than --wait-idle; the user is still told who held the GPU
    # before the give-up (test_wait_idle_gives_up_on_a_gpu_that_stays_busy_with_exit_5 failed so under load)
    from devenv.services import gpu_occupancy

    now = [0.0]

    def slow_sample(conn):
        now[0] += 3.0
        return parse_occupancy(frame(recorded_app(), util0=100), now[0])

    monkeypatch.setattr(gpu_occupancy, "sample", slow_sample)
    said: list[str] = []
    with pytest.raises(gpu_occupancy.GpusBusy) as e:
        gpu_occupancy.wait_free(object(), "0", host="h200", timeout_s=1, on_wait=said.append,  # type: ignore[arg-type]
                                clock=lambda: now[0], sleep=lambda s: None)
    assert said == ["waiting for free GPUs (0 of 1 s): GPU 0 is busy with pid 732 (root, python3, 1.1 GiB, 100% util)"]
    assert e.value.message.startswith("still busy after waiting 3 s: GPU 0 is busy with pid 732")
