"""`devenv monitor CLUSTER` on the test host's real Slurm cluster: every node of the user's running devenv jobs,
grouped by job, sampled through the login node by `srun --overlap` steps (one stream per node).

The compute nodes here have no GPU, which the monitor must say plainly. For the GPU paths, a second login
node (a throwaway sshd of this test, into the same cluster) gives its sessions PATH=tests/replay first, and
srun hands that PATH to the job's steps: on the nodes, `nvidia-smi` is the REPLAY of a real H200 recording
(tests/replay/nvidia-smi, named as such). Run under the integration lock (see slurm_testing.py).
"""

from __future__ import annotations

import asyncio
import json
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import requests
from monitor_helpers import replay_sshd, trust
from slurm_testing import REPO, live_jobs, squeue, wait_for
from sshd_fixture import free_port, make_key

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def sbatch(name: str, nodes: int) -> str:
    out = subprocess.run(["sbatch", "--parsable", f"--job-name={name}", f"--nodes={nodes}", "--time=5",
                          "--chdir=/tmp", "--output=/dev/null",   # not a slurm-N.out in the repo per run
                          "--wrap", "sleep 280"], capture_output=True, text=True, timeout=60, check=True)
    job = out.stdout.strip().split(";")[0]
    wait_for(lambda: any(j[0] == job and j[2] == "RUNNING" for j in live_jobs(name)), 60, f"job {job} to run")
    return job


def steps_of(job: str) -> list[str]:
    out = subprocess.run(["squeue", "--steps", "--noheader", f"--jobs={job}", "--format=%i %j"],
                         capture_output=True, text=True, timeout=30).stdout
    return [line for line in out.splitlines() if not line.split()[0].endswith((".batch", ".extern"))]


@pytest.fixture
def jobs(cluster):
    """Two devenv jobs of this test's owner: an environment's on both nodes, and a one-node one."""
    env_job = sbatch(cluster.job_name, 2)
    other = sbatch(f"devenv-{cluster.owner}-{cluster.env}-b", 1)
    yield env_job, other
    for job in (env_job, other):
        subprocess.run(["scancel", job], timeout=30)
    wait_for(lambda: not live_jobs(cluster.job_name) and not live_jobs(f"devenv-{cluster.owner}-{cluster.env}-b"),
             60, "the test's jobs to end")


@pytest.fixture
def replay_login(cluster, tmp_path):
    """A login node whose sessions (and so the jobs' steps) find the replay as nvidia-smi: profile `replaylogin`."""
    key = make_key(tmp_path / "id")
    with replay_sshd(tmp_path / "sshd", key, env={"REPLAY_GPUS": "2", "DEVENV_OWNER": cluster.owner}) as server:
        trust(server)
        (cluster.home / "profiles" / "hosts" / "replaylogin.yaml").write_text(textwrap.dedent(f"""\
            description: the test cluster through a login node whose PATH finds the nvidia-smi replay
            ssh:
              hostname: 127.0.0.1
              port: {server.port}
              user: root
              identity_file: {key.path}
            runtime: slurm
            python: {cluster.python}
            default_env: {cluster.env}
            slurm:
              partition: debug
            """))
        yield "replaylogin"


def test_nodes_without_a_gpu_say_so_grouped_by_job_and_a_cluster_without_a_job_too(cluster, jobs):
    env_job, other = jobs
    done = cluster.run("monitor", cluster.host, "--once", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(done.stdout)
    mine = [h for h in data["hosts"] if h["job"] and h["job"]["job_id"] in jobs]
    assert [(h["job"]["job_id"], h["job"]["node"]) for h in mine] == [
        (env_job, "node1"), (env_job, "node2"), (other, mine[2]["job"]["node"])]
    for h in mine:
        assert h["state"] == "no-gpu" and "nvidia-smi is not installed" in h["message"], h
        assert h["host"] == f"{cluster.host}/job-{h['job']['job_id']}/{h['job']['node']}"
        # no GPU, but the node's host line (its /proc, read inside the job)
        stats = h["host_stats"]
        assert stats and stats["ncpu"] and stats["mem_total_kib"] > stats["mem_used_kib"] > 0, h
    assert mine[0]["job"]["env"] == cluster.env and mine[0]["job"]["nodes"] == ["node1", "node2"]
    grouped = {j["job_id"]: [n["node"] for n in j["nodes"]] for j in data["jobs"]}
    assert grouped[env_job] == ["node1", "node2"] and len(grouped[other]) == 1
    for job in jobs:
        assert not steps_of(job), "a monitor step outlived --once"

    for job in jobs:
        subprocess.run(["scancel", job], timeout=30)
    wait_for(lambda: not live_jobs(cluster.job_name), 60, "the jobs to end")
    # with none of the user's devenv jobs running, the cluster is one row saying so (exit 0)
    idle = cluster.run("monitor", cluster.host, "--once")
    assert idle.returncode == 0, idle.stdout + idle.stderr
    assert f"{cluster.host}  no-job" in idle.stdout and "no devenv job of yours" in idle.stdout, idle.stdout


def test_replayed_gpus_on_every_node_grouped_by_job_in_json_and_the_table(cluster, jobs, replay_login):
    env_job, other = jobs
    done = cluster.run("monitor", replay_login, "--once", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(done.stdout)
    mine = [h for h in data["hosts"] if h["job"] and h["job"]["job_id"] in jobs]
    assert len(mine) == 3
    for h in mine:
        assert h["state"] == "ok", h
        assert [g["name"] for g in h["gpus"]] == ["NVIDIA H200", "NVIDIA H200"] and h["driver_version"]
    by_job = {j["job_id"]: j for j in data["jobs"]}
    assert [n["node"] for n in by_job[env_job]["nodes"]] == ["node1", "node2"]
    assert all(n["gpus"] == 2 and n["state"] == "ok" for j in jobs for n in by_job[j]["nodes"])
    assert by_job[env_job]["env"] == cluster.env and by_job[other]["env"] == f"{cluster.env}-b"

    table = cluster.run("monitor", replay_login, "--once")
    assert table.returncode == 0, table.stderr
    assert f"{replay_login}/job-{env_job}/node1  ok  driver " in table.stdout
    assert f"  Slurm job {env_job} (env {cluster.env}" in table.stdout and "[1] NVIDIA H200 |" in table.stdout
    for job in jobs:
        assert not steps_of(job)


def test_the_tui_shows_each_jobs_nodes_with_replayed_gpus_and_stops_its_streams(cluster, jobs, replay_login,
                                                                               monkeypatch):
    """The app as `devenv monitor CLUSTER` builds it (sources, one HostSampler per node on its own login
    connection), driven by a Pilot: panels in job order, each node's replayed GPUs, one live step per node."""
    from devenv.config.profiles import load_host
    from devenv.services.monitor_sources import sampler_for, sources
    from devenv.tui.monitor_app import HostPanel, MonitorServices, create_monitor_app
    from devenv.tui.monitor_view import flatten

    env_job, other = jobs
    for key in ("DEVENV_HOME", "DEVENV_KNOWN_HOSTS", "DEVENV_OWNER"):
        monkeypatch.setenv(key, cluster.environ[key])
    found = [s for s in sources([load_host(replay_login)]) if s.place and s.place.job_id in jobs]
    names = [s.name for s in found]
    assert names == [f"{replay_login}/job-{env_job}/node1", f"{replay_login}/job-{env_job}/node2",
                     f"{replay_login}/job-{other}/{found[2].place.node}"]
    by_name = {s.name: s for s in found}
    app = create_monitor_app(names, lambda n: sampler_for(by_name[n], 0.5), MonitorServices(), redraw_every=0.5)

    async def drive() -> dict[str, str]:
        async with app.run_test(size=(160, 80)) as pilot:
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                await pilot.pause(0.5)
                panels = list(app.query(HostPanel))
                if all(p.snapshot.state == "ok" and len(p.snapshot.gpus) == 2 and p.snapshot.processes_t
                       for p in panels):
                    break
            running = {job: len(steps_of(job)) for job in jobs}
            shown = {p.host: flatten(p.view, 160).plain for p in app.query(HostPanel)}
            return {"order": ",".join(p.host for p in app.query(HostPanel)), "steps": json.dumps(running), **shown}

    shown = asyncio.run(drive())
    assert shown["order"] == ",".join(names)
    for name in names:
        text = shown[name]
        assert "● " + name in text and "NVIDIA H200" in text, text
        job = by_name[name].place.job_id
        assert f"Slurm job {job} (env " in text and f"node {by_name[name].place.node}" in text
    # one GPU stream and one process loop per node, each one step for as long as it runs (never a step per
    # sample); the first query of each node had ended before its stream started
    steps = json.loads(shown["steps"])
    assert steps == {env_job: 2 * 2, other: 2}
    wait_for(lambda: not steps_of(env_job) and not steps_of(other), 30, "the monitor's steps to end after quit")


class Records:
    """The NDJSON lines of a running `devenv monitor --watch --json`, read on a thread (so a wait can time out)."""

    def __init__(self, proc: subprocess.Popen):
        self.lines: queue.Queue = queue.Queue()
        self.seen: list[dict] = []
        threading.Thread(target=self._read, args=(proc.stdout,), daemon=True).start()

    def _read(self, stream) -> None:
        for line in stream:
            self.lines.put(line)
        self.lines.put(None)

    def wait(self, predicate, timeout: float, what: str) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            assert line is not None, f"the monitor ended while waiting for {what}: {self.seen[-3:]}"
            rec = json.loads(line)
            self.seen.append(rec)
            if predicate(rec):
                return rec
        raise AssertionError(f"not within {timeout:.0f} s: {what}; the last records: "
                             f"{[(r['host'], r['state']) for r in self.seen[-5:]]}")


def test_watch_json_follows_a_job_that_starts_and_ends(cluster):
    """`devenv monitor testcluster --watch --json` started with no job of ours: a job started after it writes
    its node's records, and once cancelled one job-ended record (not a stream that reconnects); its
    --prometheus endpoint (same process) shows the same hosts; SIGINT ends the monitor with exit 0, its steps
    and the job gone."""
    others = [j for j in squeue() if j[1].startswith("devenv-") and j[2] in ("RUNNING", "PENDING", "CONFIGURING")]
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "devenv", "monitor", cluster.host, "--watch", "--json",
                             "--interval", "0.5", "--prometheus", f"127.0.0.1:{port}"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=cluster.environ, cwd=REPO)

    def host_up_lines() -> list[str]:
        text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        return [line for line in text.splitlines() if line.startswith("devenv_host_up{")]

    records = Records(proc)
    job = None
    try:
        first = records.wait(lambda r: True, 60, "the monitor's first record")
        if not others:   # nobody else's devenv job on the shared cluster: the cluster's one no-job row
            assert (first["host"], first["state"]) == (cluster.host, "no-job"), first
            assert host_up_lines() == [f'devenv_host_up{{Hostname="{cluster.host}",state="no-job"}} 0.0']
        job = sbatch(cluster.job_name, 1)
        node = records.wait(lambda r: (r["job"] or {}).get("job_id") == job and r["state"] == "no-gpu", 90,
                            f"a record of job {job}'s node")
        assert node["host"] == f"{cluster.host}/job-{job}/{node['job']['node']}"
        assert node["job"]["env"] == cluster.env and "nvidia-smi is not installed" in node["message"]
        scraped = host_up_lines()
        assert any(line.startswith(f'devenv_host_up{{Hostname="{node["host"]}",state=') for line in scraped), scraped
        assert not any(f'Hostname="{cluster.host}"' in line for line in scraped), "the no-job row stayed"
        subprocess.run(["scancel", job], timeout=30, check=True)
        ended = records.wait(lambda r: r["host"] == node["host"] and r["state"] == "job-ended", 90,
                             f"job {job}'s node to say job-ended")
        assert f"job {job}" in ended["message"] and "no longer runs" in ended["message"]
        assert ended["job"]["job_id"] == job
        assert f'devenv_host_up{{Hostname="{node["host"]}",state="job-ended"}} 0.0' in host_up_lines()
        # it stays said: no stream to the ended job's node, no record of it again (read for a few follows)
        with pytest.raises(AssertionError, match="not within"):
            records.wait(lambda r: r["host"] == node["host"], 12, "another record of the ended node")
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(30)
        if job is not None:
            subprocess.run(["scancel", job], timeout=30)
    assert code == 0, proc.stderr.read()
    wait_for(lambda: not live_jobs(cluster.job_name), 60, "the job to end")
    assert not steps_of(job), "a monitor step outlived the monitor"
