"""The Slurm path as users meet it on the test host's real 2-node cluster made busy (another local user's jobs
fill it), drained (scontrol), and ended from outside: queue waits a user can read (in `up`, `status`, `monitor`
and --json), `check` reading drained nodes, `exec` as on a container (stdin, streamed output, -t, exit code,
no srun lines), an ended job's exit code and hint, and `sanity --nodes` more than the cluster has.

Other agents share this cluster: a drain lasts one test and is resumed in the fixture's teardown whatever
happens, and the filler user's jobs are cancelled there too. Every wait is a bounded poll on Slurm's state or
on a line, never a sleep. Run under the integration lock (see slurm_testing.py).
"""

from __future__ import annotations

import json
import pwd
import queue
import select
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

import pytest
import slurm_clusters
from slurm_testing import REPO, live_jobs, squeue, wait_for

pytestmark = pytest.mark.integration

FILLER = "devenv-slurmfill"


def filler_user() -> str:
    """The filler of the running test's cluster: one user per cluster, so that the two clusters' chains (side by
    side on two workers) never add, cancel the jobs of, or delete the same user."""
    return FILLER + ("2" if slurm_clusters.current().second else "")


def node_states() -> dict[str, str]:
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True, timeout=30).stdout
    return dict(line.split() for line in out.splitlines() if line.strip())


def answering(*nodes: str) -> bool:
    """Each node up and answering: idle, mix or alloc, without Slurm's `*` (not responding). A resumed node is
    `idle*` until slurmctld's next ping comes back (Slurm marks a resumed node not responding and pings it)."""
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], capture_output=True, text=True, timeout=30).stdout
    states = dict(line.split() for line in out.splitlines() if line.strip())
    return all(states.get(n) in ("idle", "mix", "alloc") for n in nodes)


@contextmanager
def drained(*nodes: str, reason: str):
    """The nodes drained with reason for the block; resumed on the way out, whatever happened, and answering again
    before the next test (one drained right after a resume read 'drained, not responding')."""
    names = ",".join(nodes)
    try:
        wait_for(lambda: answering(*nodes), 60, f"{names} answering before the drain")
        subprocess.run(["scontrol", "update", f"nodename={names}", "state=drain", f"reason={reason}"], check=True,
                       timeout=30)
        wait_for(lambda: all(node_states().get(n, "").startswith("drain") for n in nodes), 30, f"{names} drained")
        yield
    finally:
        subprocess.run(["scontrol", "update", f"nodename={names}", "state=resume"], timeout=30)
        wait_for(lambda: answering(*nodes), 60, f"{names} resumed and answering")


@pytest.fixture
def filler():
    """Another local user, whose jobs fill the cluster; their jobs are cancelled afterwards, and the user
    removed if this fixture made it."""
    user = filler_user()
    made = False
    try:
        pwd.getpwnam(user)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", user],
                       check=True, timeout=30)
        made = True

    def submit(*args: str) -> str:
        done = subprocess.run(["runuser", "-u", user, "--", "sbatch", "--parsable", "--partition=debug",
                               "--time=5", "--job-name=filler", "--chdir=/tmp", "--output=/dev/null", *args,
                               "--wrap", "sleep 300"], capture_output=True, text=True, check=True, timeout=30)
        return done.stdout.strip().split(";")[0]

    try:
        yield submit
    finally:
        subprocess.run(["scancel", "-u", user], timeout=30)
        wait_for(lambda: not [j for j in squeue("--user=" + user) if j[2] in ("PENDING", "RUNNING",
                                                                               "COMPLETING")],
                 60, "the filler's jobs gone")
        if made:
            subprocess.run(["userdel", user], timeout=30)


def fill(submit) -> list[str]:
    """The whole cluster taken by the filler (OverSubscribe=FORCE:4 on 2 CPUs a node: four 2-node jobs of 2
    CPUs), and one more of theirs queued ahead of ours."""
    user = filler_user()
    running = [submit("--nodes=2", "--cpus-per-task=2") for _ in range(4)]
    wait_for(lambda: all(j[2] == "RUNNING" for j in squeue("--user=" + user) if j[0] in running), 60,
             "the filler's jobs running")
    ahead = submit("--nodes=2", "--cpus-per-task=2")
    wait_for(lambda: any(j[0] == ahead and j[3] != "None" for j in squeue("--user=" + user)), 30,
             "the filler's queued job given a reason")
    return running + [ahead]


class Lines:
    """A process's stream read on a thread: lines waited for with a bound."""

    def __init__(self, stream):
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream) -> None:
        for line in stream:
            self._queue.put(line)
        self._queue.put(None)

    def wait(self, predicate, timeout: float, what: str) -> str:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._queue.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                line = ""
            if line is None:
                raise AssertionError(f"the stream ended before {what}: {self.lines}")
            if line:
                self.lines.append(line)
                print("line:", line.rstrip())
                if predicate(line):
                    return line
            if time.monotonic() > deadline:
                raise AssertionError(f"not within {timeout:.0f} s: {what}: {self.lines}")

    def rest(self) -> list[str]:
        while True:
            line = self._queue.get(timeout=60)
            if line is None:
                return self.lines
            self.lines.append(line)


def popen(cluster, *args: str, stdin=subprocess.DEVNULL) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "devenv", *args], stdin=stdin, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=cluster.environ, cwd=REPO)


# --- check ------------------------------------------------------------------------------------------------

def test_check_reads_drained_nodes_per_node_with_reasons_and_submits_no_probe(cluster):
    """Before: IDLE+DRAIN was read as idle, check said PASS "can start now", then its probe job waited 60 s
    and blamed busy nodes."""
    before = {j[0] for j in squeue("--name=devenv-check")}
    with drained("node1", "node2", reason="devenv test: disk swap"):
        done = cluster.run("check", cluster.host, "--json")
    checks = {c["id"]: c for c in json.loads(done.stdout)["checks"]}
    request, nodes = checks["slurm.request"], checks["slurm.nodes"]
    assert request["status"] == "warn" and "can start now" not in request["value"], request
    assert "no node of partition debug can take a job now" in request["value"], request
    assert nodes["status"] == "warn" and "node1 drained: devenv test: disk swap" in nodes["value"], nodes
    assert "node2 drained: devenv test: disk swap" in nodes["value"], nodes
    assert "node.job" not in checks and checks["python"]["status"] == "skip", checks.get("python")
    assert {j[0] for j in squeue("--name=devenv-check")} - before == set()   # no probe job was submitted
    assert done.returncode == 0, done.stdout + done.stderr             # warnings: the cluster may come back


def test_check_with_one_node_drained_still_finds_the_other(cluster):
    with drained("node1", reason="devenv test: fan"):
        done = cluster.run("check", cluster.host, "--json")
    checks = {c["id"]: c for c in json.loads(done.stdout)["checks"]}
    assert checks["slurm.request"]["status"] == "pass", checks["slurm.request"]
    assert "node1 drained: devenv test: fan" in checks["slurm.nodes"]["value"]
    assert checks["node.job"]["status"] == "pass" and checks["node.job"]["details"]["node"] == "node2"


# --- a full queue -----------------------------------------------------------------------------------------

def test_a_full_queue_is_said_in_up_status_and_monitor_then_the_timeout_cancels(cluster, filler):
    """Before: up's first line said reason "None", a line came only when the reason changed, with no elapsed
    time, limit or position; `monitor` said no devenv job runs."""
    fill(filler)
    cluster.write_profile(queue_timeout=35)
    up = popen(cluster, "up", cluster.host, "--detach")
    errors = Lines(up.stderr)
    try:
        errors.wait(lambda line: "pending" in line and "position" in line, 60, "up's first pending line")
        status = cluster.run("status", cluster.host, "--json")
        row = next(e for e in json.loads(status.stdout)["environments"] if e["env"] == cluster.env)
        assert row["state"] == "pending" and row["queue"]["reason"] == "Priority", row
        assert row["queue"]["position"] == 2 and row["queue"]["pending"] == 2 and row["queue"]["limit_s"] == 35
        assert "Priority (jobs of higher priority are ahead of it)" in row["detail"], row
        monitor = cluster.run("monitor", cluster.host, "--once", "--json")
        assert monitor.returncode == 0, monitor.stdout + monitor.stderr
        host, = json.loads(monitor.stdout)["hosts"]
        assert host["state"] == "job-pending" and "no devenv job" not in host["message"], host
        assert f"({cluster.job_name}) pending" in host["message"] and "Priority" in host["message"], host
        assert up.wait(timeout=120) == 1
    finally:
        if up.poll() is None:
            up.kill()
    said = errors.rest()
    pending = [line for line in said if " pending " in line and line.startswith("==> Job")]
    assert len(pending) >= 3, said                      # at a steady cadence, the reason unchanged
    assert not any("None" in line for line in pending), pending
    assert all("(at most 35 s: slurm.queue_timeout): Priority" in line and "position 2 of 2 in partition debug"
               in line for line in pending), pending
    assert any("did not start within 35 s" in line and "devenv cancelled it" in line for line in said), said
    wait_for(lambda: not live_jobs(cluster.job_name), 30, "the timed-out job cancelled")


# --- exec -------------------------------------------------------------------------------------------------

def test_exec_on_a_cluster_behaves_as_on_a_container(cluster, tmp_path):
    """Before: stdin was refused (default env) or dropped with exit 0 (sshd: false); output came only when the
    command ended; srun added 'srun: error: node1: task 0: Exited with exit code 3'."""
    done = cluster.run("up", cluster.host, "--detach", timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    try:
        _exec_checks(cluster, tmp_path)
    finally:
        down = cluster.run("down", cluster.host)
        assert down.returncode == 0, down.stdout + down.stderr


def _without_login_noise(stderr: str) -> str:
    """stderr less what this machine's login shell itself may print: root's ~/.bashrc runs `pyenv init -`, whose
    `pyenv rehash`, which prints "rm: cannot remove '/root/.pyenv/shims/tmp...'" and "pyenv: cannot rehash: ...
    isn't writable" when two logins race (seen in a full run); ssh shows those lines too. Everything else,
    devenv's and srun's lines included, stays compared exactly."""
    return "".join(line for line in stderr.splitlines(keepends=True)
                   if not line.startswith("pyenv: cannot rehash:") and "/.pyenv/shims/" not in line)


def _exec_checks(cluster, tmp_path) -> None:
    def exec_(*argv: str, stdin: str | None = None, tty: bool = False) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "devenv", "exec", cluster.host, *(["-t"] if tty else []),
                               "--", *argv], input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL,
                              capture_output=True, text=True, env=cluster.environ, cwd=REPO, timeout=120)

    # stdin reaches the command: the default env, then one with sshd: false
    piped = exec_("cat", stdin="X from the laptop\n")
    assert (piped.returncode, piped.stdout) == (0, "X from the laptop\n"), piped.stderr
    env_file = cluster.home / "profiles" / "envs" / f"{cluster.env}.yaml"
    env_file.write_text(env_file.read_text() + "sshd: false\n")
    piped = exec_("python3", "-c", "import sys; print(sys.stdin.read().upper(), end='')", stdin="three\n")
    assert (piped.returncode, piped.stdout) == (0, "THREE\n"), piped.stderr

    # the command's exit code, its stderr as written (no srun line), with and without stdin
    for stdin in (None, ""):
        failed = exec_("sh", "-c", "echo out; echo err >&2; exit 3", stdin=stdin)
        assert (failed.returncode, failed.stdout, _without_login_noise(failed.stderr)) == (3, "out\n", "err\n"), failed
    killed = exec_("sh", "-c", "kill -TERM $$")
    assert killed.returncode == 143 and "srun" not in killed.stderr, killed

    # in the workspace, as in a container
    here = exec_("pwd")
    assert here.stdout.strip() == str(cluster.workspace), here

    # -t: a terminal on the node
    tty = exec_("sh", "-c", "test -t 0 && test -t 1 && echo terminal", stdin="", tty=True)
    assert tty.returncode == 0 and "terminal" in tty.stdout, tty

    # streamed: the first line arrives while the command still runs (it waits for a file this test makes)
    go = tmp_path / "go"
    script = f"echo first; i=0; while [ ! -e {go} ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; echo second"
    for stdin in (subprocess.DEVNULL, subprocess.PIPE):
        if go.exists():
            go.unlink()
        proc = subprocess.Popen([sys.executable, "-m", "devenv", "exec", cluster.host, "--", "sh", "-c", script],
                                stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cluster.environ,
                                cwd=REPO)
        if proc.stdin:
            proc.stdin.close()
        try:
            ready, _, _ = select.select([proc.stdout], [], [], 90)
            assert ready, "no output within 90 s"
            assert proc.stdout.readline() == b"first\n"
            assert proc.poll() is None                   # the command still runs: output was not held
            go.touch()
            assert proc.stdout.read() == b"second\n" and proc.wait(timeout=60) == 0
        finally:
            if proc.poll() is None:
                proc.kill()


# --- a job ended from outside -----------------------------------------------------------------------------

def test_a_job_cancelled_from_outside_while_up_holds_the_tunnel_is_exit_1_with_a_hint_that_works(cluster):
    """Before: exit 3 (cannot connect) and the hint `devenv jupyter ...`, which cannot work."""
    up = popen(cluster, "up", cluster.host)
    errors = Lines(up.stderr)
    try:
        errors.wait(lambda line: "Tunnels open" in line, 240, "up holding the tunnel")
        job, = live_jobs(cluster.job_name)
        subprocess.run(["scancel", job[0]], check=True, timeout=30)
        code = up.wait(timeout=120)
    finally:
        if up.poll() is None:
            up.kill()
    said = "".join(errors.rest())
    assert code == 1, said
    assert "CANCELLED" in said and f"`devenv up {cluster.host}`" in said, said
    assert "devenv jupyter" not in said and "Traceback" not in said, said


# --- sanity -----------------------------------------------------------------------------------------------

def test_sanity_asking_more_nodes_than_the_cluster_has_names_the_flag(cluster):
    """Before: 'Node count specification invalid' with the hint to fix the host profile's slurm: settings."""
    done = cluster.run("sanity", cluster.host, "--nodes", "3")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--nodes 3 asks for 3 node(s), partition debug has 2 (node1, node2)" in done.stderr, done.stderr
    assert f"devenv sanity {cluster.host} --nodes 2" in done.stderr and "host profile" not in done.stderr
    assert not live_jobs("devenv-sanity")
