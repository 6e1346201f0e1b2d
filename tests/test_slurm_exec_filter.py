"""`devenv exec` on a cluster: the login node's wrapper around srun (cluster/slurm_job.EXEC_FILTER) keeps the
command's stdout and stderr as written and its exit code, and takes off only srun's own report of that code.
srun's lines are those Slurm 22.05 printed on the test cluster (`srun --overlap ... sh -c 'exit 3'` and a TERMed
task); a local shell stands in for srun here, the real one runs in tests/integration/slurm."""

from __future__ import annotations

import subprocess
import sys

from devenv.cluster import slurm_job

SRUN_SAID = ("srun: error: node1: task 0: Exited with exit code 3\n", "srun: error: node1: task 0: Terminated\n",
             "srun: Force Terminated StepId=1.2\n")


def wrapped(script: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-u", "-c", slurm_job.EXEC_FILTER, "sh", "-c", script], input=stdin,
                          capture_output=True, text=True, timeout=60)


def test_srun_reports_are_taken_off_and_the_exit_code_kept():
    said = "".join(f"printf '%s' '{line}' >&2; " for line in SRUN_SAID)
    done = wrapped(f"echo out; echo err >&2; printf 'no newline' >&2; sleep 0.3; echo ' yet' >&2; {said} exit 3")
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\nno newline yet\n")


def test_other_srun_errors_stay_and_stdin_passes():
    done = wrapped("cat; echo 'srun: error: Unable to create step for job 7: Job/step already completing' >&2",
                   stdin="piped\n")
    assert done.stdout == "piped\n" and "Unable to create step" in done.stderr and done.returncode == 0


def test_a_command_killed_by_a_signal_is_128_plus_its_number():
    assert wrapped("kill -TERM $$").returncode == 143


def test_the_login_command_runs_srun_in_the_job_with_a_pty_only_when_asked():
    plain = slurm_job.exec_command("42", "node1", "/opt/py/bin/python", "/home/me/ws", ["python", "t.py"])
    assert "srun --overlap --jobid=42 --nodes=1 --ntasks=1 --nodelist=node1 --unbuffered --quiet --" in plain
    assert plain.startswith("/opt/py/bin/python -u -c ") and plain.endswith("devenv /home/me/ws python t.py")
    tty = slurm_job.exec_command("42", "node1", "/opt/py/bin/python", "/home/me/ws", ["htop"], tty=True)
    assert "--pty --quiet --" in tty and "--unbuffered" not in tty
