"""A devenv environment as a Slurm job (L0): the profile's scheduler settings, validated, and the exact sbatch
arguments and job script they make. No I/O: the adapter (devenv/schedulers/slurm.py) runs what this builds.

Every value becomes one `--option=value` word, quoted for the login node's shell; a value is checked against
what Slurm accepts for that option first, so no value can turn into another option or a second command.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import asdict, dataclass, field
from typing import Any

from devenv.env import jupyter_scripts

NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,63}")            # partition, account, qos, gpu type
# Slurm's time formats: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S (man sbatch, --time)
TIME_RE = re.compile(r"\d{1,6}(:\d{1,2}){0,2}|\d{1,4}-\d{1,2}(:\d{1,2}){0,2}")
MEM_RE = re.compile(r"\d{1,9}[KMGT]?")
# a feature expression (--constraint): names joined by & | , with [ ] ( ) * and counts; no spaces, no leading '-'
CONSTRAINT_RE = re.compile(r"[A-Za-z0-9_\[\(][A-Za-z0-9_.&|,:*\[\]()-]{0,255}")
EXTRA_RE = re.compile(r"--[a-z][a-z0-9-]{1,40}(=[A-Za-z0-9_.,:=/@%+\[\]-]{1,200})?")
# options devenv sets itself (or that would change what the job is): not allowed in extra_sbatch
OWN_OPTIONS = {"job-name", "output", "error", "input", "wrap", "parsable", "chdir", "comment", "nodes",
               "ntasks-per-node", "no-requeue", "requeue", "partition", "account", "qos", "time", "gres",
               "gpus-per-node", "cpus-per-gpu", "mem-per-gpu", "constraint", "array", "export", "export-file",
               "get-user-env", "wait", "test-only", "uid", "gid", "container", "dependency", "burst-buffer",
               "bb", "bbf", "open-mode", "propagate", "kill-on-invalid-dep"}

JOB_PREFIX = "devenv-"


class SettingError(ValueError):
    """A scheduler setting Slurm would not accept, or that could become another option: (field, problem, hint)."""

    def __init__(self, field_name: str, problem: str, hint: str, value: str | None = None):
        super().__init__(f"{field_name}: {problem}")
        self.field = field_name
        self.problem = problem  # never the value itself: the caller shows a short preview of it (a pasted key?)
        self.hint = hint
        self.value = value


@dataclass(frozen=True)
class SlurmSettings:
    """`slurm:` in a host profile: what each environment job asks Slurm for."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str = "01:00:00"
    nodes: int = 1
    gpus_per_node: int = 0
    gpu_type: str | None = None
    cpus_per_gpu: int | None = None
    mem_per_gpu: str | None = None
    cpus_per_node: int | None = None
    mem: str | None = None
    constraint: str | None = None
    extra_sbatch: tuple[str, ...] = ()
    queue_timeout: float = 300.0      # seconds `up` waits for a pending job before cancelling it

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["extra_sbatch"] = list(self.extra_sbatch)
        return data


# What each kind of Slurm value must look like: (pattern, what a mismatch is not, how to write it); a "{}" in
# the hint is the field's name
_FORMS = {
    "name": (NAME_RE, "a Slurm name", "use letters, digits, '_', '.', '+', '-' (not starting with '-')"),
    "time": (TIME_RE, "a Slurm time limit",
             'write e.g. time: "04:00:00" (HH:MM:SS), "90" (minutes) or "1-00:00:00" (days-HH:MM:SS)'),
    "mem": (MEM_RE, "a memory size", 'write e.g. {}: "32G"'),
    "constraint": (CONSTRAINT_RE, "a feature expression",
                   'write e.g. constraint: "a100&ib" (features joined by & | , without spaces)'),
}


def _must_be(form: str, field_name: str, value: str) -> str:
    pattern, what, hint = _FORMS[form]
    if not pattern.fullmatch(value):
        raise SettingError(field_name, f"is not {what}", hint.format(field_name), value)
    return value


def check_name(field_name: str, value: str) -> str:
    return _must_be("name", field_name, value)


def check_time(value: str) -> str:
    return _must_be("time", "time", value)


def check_mem(field_name: str, value: str) -> str:
    return _must_be("mem", field_name, value)


def check_constraint(value: str) -> str:
    return _must_be("constraint", "constraint", value)


def check_extra(value: str) -> str:
    """One extra sbatch option as one word: `--name=value` or `--flag`, never one devenv sets itself."""
    if not EXTRA_RE.fullmatch(value):
        raise SettingError("extra_sbatch", "is not one --option=value word",
                           "write each option as one word, e.g. --exclusive or --mail-type=END (no spaces, "
                           "no quotes, no short -x options)", value)
    name = value[2:].split("=", 1)[0]
    if name in OWN_OPTIONS:
        raise SettingError("extra_sbatch", f"--{name} is set by devenv or by its own field",
                           "use the profile's field for it (partition, account, qos, time, nodes, "
                           "gpus_per_node, ...), or leave it out")
    return value


def validate(settings: SlurmSettings) -> SlurmSettings:
    """Every field checked (raises SettingError on the first bad one); returns the settings unchanged."""
    for name in ("partition", "account", "qos", "gpu_type"):
        value = getattr(settings, name)
        if value is not None:
            check_name(name, value)
    check_time(settings.time)
    for name in ("mem_per_gpu", "mem"):
        value = getattr(settings, name)
        if value is not None:
            check_mem(name, value)
    if settings.constraint is not None:
        check_constraint(settings.constraint)
    for item in settings.extra_sbatch:
        check_extra(item)
    if settings.nodes < 1:
        raise SettingError("nodes", f"{settings.nodes} nodes", "nodes: 1 or more")
    if settings.gpu_type and not settings.gpus_per_node:
        raise SettingError("gpu_type", "is set but gpus_per_node is 0", "set gpus_per_node: N as well")
    if (settings.cpus_per_gpu or settings.mem_per_gpu) and not settings.gpus_per_node:
        raise SettingError("cpus_per_gpu" if settings.cpus_per_gpu else "mem_per_gpu",
                           "needs GPUs", "set gpus_per_node: N, or use cpus_per_node / mem")
    return settings


def job_name(owner: str, env_name: str) -> str:
    """The job's name, how devenv finds it again (with squeue --me --name)."""
    return check_name("job name", f"{JOB_PREFIX}{owner}-{env_name}")


@dataclass(frozen=True)
class JobRequest:
    """One environment job: settings (overridable per command) + who it is for."""

    settings: SlurmSettings
    name: str
    spec_hash: str
    log_path: str                       # absolute, on the shared file system
    workdir: str                        # absolute
    nodes: int | None = None            # overrides settings.nodes (sanity --nodes N)
    extra: tuple[str, ...] = field(default_factory=tuple)

    def options(self) -> list[str]:
        """sbatch's options, one word each (validated values only)."""
        s = validate(self.settings)
        nodes = self.nodes or s.nodes
        words = [f"--job-name={self.name}", f"--nodes={int(nodes)}", "--ntasks-per-node=1", "--no-requeue",
                 f"--time={s.time}", f"--output={self.log_path}", f"--chdir={self.workdir}",
                 f"--comment=devenv:{self.spec_hash}"]
        gres = s.gpus_per_node and (f"gpu:{s.gpu_type}:{s.gpus_per_node}" if s.gpu_type else f"gpu:{s.gpus_per_node}")
        optional = (("partition", s.partition), ("account", s.account), ("qos", s.qos), ("gres", gres),
                    ("cpus-per-gpu", s.cpus_per_gpu and int(s.cpus_per_gpu)), ("mem-per-gpu", s.mem_per_gpu),
                    ("cpus-per-task", s.cpus_per_node and int(s.cpus_per_node)), ("mem", s.mem),
                    ("constraint", s.constraint))
        words.extend(f"--{option}={value}" for option, value in optional if value)
        words.extend(check_extra(x) for x in (*s.extra_sbatch, *self.extra))
        return words

    def command(self) -> str:
        """The login node's command line: `sbatch --parsable OPTIONS` (the script comes on stdin)."""
        return "sbatch --parsable " + " ".join(shlex.quote(w) for w in self.options())


def _check_path(path: str) -> str:
    if not path.startswith("/") or any(c in path for c in "\n\r\0"):
        raise SettingError("path", f"'{path}' is not an absolute path", "this is a bug in devenv")
    return path


def batch_script(python: str, launcher: str, env_dir: str, workspace: str, preferred_port: int,
                 autostop_dir: str | None = None) -> str:
    """The job script: exec the launcher (so Slurm's signals at cancel/time limit reach Jupyter directly). With
    autostop_dir, the launcher starts the autostop watcher in the job, waiting there to be armed."""
    argv = [python, _check_path(launcher), _check_path(env_dir), _check_path(workspace), str(int(preferred_port))]
    if autostop_dir:
        argv.append(_check_path(autostop_dir))
    return ("#!/bin/bash\n"
            "# devenv environment job: Jupyter on this node's loopback, reached through `srun --overlap`.\n"
            "set -u\n"
            "exec " + " ".join(shlex.quote(a) for a in argv) + "\n")


# Runs on the job's first node (the batch step): pick a loopback port, record where Jupyter is for this job
# (job-<id>.json next to the token, on the shared file system), then become Jupyter.
LAUNCHER = r'''"""devenv: start Jupyter for this Slurm job on this node's loopback (written by devenv; edits are lost)."""
import json, os, socket, sys, time
d, workspace, preferred = sys.argv[1], sys.argv[2], int(sys.argv[3])
''' + jupyter_scripts.FREE_PORT + r'''port = free(preferred) or free(0)
os.makedirs(workspace, exist_ok=True)
job = os.environ.get("SLURM_JOB_ID", "0")
state = {"job_id": job, "node": os.environ.get("SLURMD_NODENAME") or socket.gethostname(), "port": port,
         "pid": os.getpid(), "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
         "workspace": workspace, "python": sys.executable}
tmp = os.path.join(d, "job-%s.json.tmp" % job)
with open(tmp, "w") as f:
    json.dump(state, f)
os.replace(tmp, os.path.join(d, "job-%s.json" % job))
print("devenv: jupyter for job %s on %s port %d" % (job, state["node"], port), flush=True)
watcher = os.path.join(d, "autostop_watcher.py")
if len(sys.argv) > 4 and os.path.exists(watcher):   # waits beside Jupyter (this pid, once exec'd) to be armed
    import subprocess
    with open(os.path.join(d, "autostop-%s.log" % job), "ab") as log:
        subprocess.Popen([sys.executable, watcher, "--in-job", sys.argv[4], str(os.getpid())],
                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, close_fds=True)
os.chdir(workspace)
os.execv(sys.executable, [sys.executable, "-m", "jupyterlab", "--config=" + os.path.join(d, "jupyter_server_config.py"),
                          "--ServerApp.port=%d" % port, "--ServerApp.root_dir=" + workspace])
'''  # noqa: E501 (the launcher's text)

# Runs on a compute node under `srun --overlap`: copy stdin to 127.0.0.1:PORT and back (a stdio relay, as
# `docker system dial-stdio` or `ssh -W` do), so no port is opened on any network. Ends when either side does.
# With WAIT_S it is a relay started ahead of Jupyter (the tunnel's first, while `up` waits): it tries to connect
# until WAIT_S have passed, and with PORT 0 reads the port from the launcher's job-<id>.json (STATE_FILE).
RELAY = (
    "import json,os,socket,sys,select,time\n"
    "a=sys.argv[1:]\n"
    "end=time.monotonic()+(float(a[1]) if len(a)>1 else 0)\n"
    "while True:\n"
    " try:\n"
    "  p=int(a[0])\n"
    "  if not p:\n"
    "   with open(a[2]) as f: p=int(json.load(f)['port'])\n"
    "  s=socket.create_connection(('127.0.0.1',p))\n"
    "  break\n"
    " except (OSError,ValueError,KeyError,IndexError):\n"
    "  if time.monotonic()>=end: raise\n"
    "  time.sleep(0.05)\n"
    "s.setsockopt(socket.IPPROTO_TCP,socket.TCP_NODELAY,1)\n"
    "fds=[0,s]\n"
    "while fds:\n"
    " r=select.select(fds,[],[])[0]\n"
    " if 0 in r:\n"
    "  b=os.read(0,65536)\n"
    "  if b: s.sendall(b)\n"
    "  else: s.shutdown(socket.SHUT_WR); fds.remove(0)\n"
    " if s in r:\n"
    "  b=s.recv(65536)\n"
    "  if not b: break\n"
    "  sys.stdout.buffer.write(b); sys.stdout.buffer.flush()\n"
)


def step_command(job_id: str, node: str, argv: list[str]) -> str:
    """`srun --overlap` of one task on one node of a running job, for the login node's shell."""
    if not re.fullmatch(r"\d+", job_id):
        raise SettingError("job id", f"'{job_id}' is not a job id", "this is a bug in devenv")
    check_name("node", node)
    words = ["srun", "--overlap", f"--jobid={job_id}", "--nodes=1", "--ntasks=1", f"--nodelist={node}",
             "--unbuffered", "--quiet", "--"] + argv
    return " ".join(shlex.quote(w) for w in words)


def run_step_words(job_id: str, node: str, workspace: str) -> list[str]:
    """The srun (on the login node) under which a detached run's supervisor is a step of the job on node, in
    the workspace: no output of srun's own (the run's goes to its log), no input."""
    if not re.fullmatch(r"\d+", job_id):
        raise SettingError("job id", f"'{job_id}' is not a job id", "this is a bug in devenv")
    check_name("node", node)
    if not workspace.startswith("/"):
        raise SettingError("workspace", f"'{workspace[:40]}' is not an absolute path", "this is a bug in devenv")
    return ["srun", "--overlap", f"--jobid={job_id}", "--nodes=1", "--ntasks=1", f"--nodelist={node}",
            f"--chdir={workspace}", "--input=none", "--quiet", "--"]


# `devenv exec` on the login node: srun runs the command on the job's node with stdin, stdout and stderr passed
# through as they come, and exits with the command's code; this wrapper only takes srun's own report of that
# code off stderr ("srun: error: node1: task 0: Exited with exit code 3", "...: Terminated", "Force Terminated
# StepId=..."), which the user did not write and which a container's exec does not add. Every other srun line
# (a step it cannot start) is kept. Ctrl-C on a terminal reaches srun (same process group), which passes it to
# the command; the wrapper waits for srun. srun outlives a lost ssh session (it blocks SIGPIPE), so the wrapper
# TERMs it once its own parent (the session's sshd or shell) is gone: srun then cancels its step.
EXEC_FILTER = r'''
import os, re, select, signal, subprocess, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
noise = re.compile(rb"srun: (error: [\w.-]+: tasks? [\d,-]+: .*|Force Terminated .*)\r?\n")
srun = subprocess.Popen(sys.argv[1:], stderr=subprocess.PIPE)
fd, held, out, parent = srun.stderr.fileno(), b"", sys.stderr.buffer, os.getppid()
while True:
    ready = select.select([fd], [], [], 0.2 if held else 2.0)[0]
    if parent and os.getppid() != parent:
        srun.terminate()
        parent = 0
    data = os.read(fd, 65536) if ready else b""
    if ready and not data:
        break
    held += data
    lines = held.splitlines(True)
    held = lines.pop() if lines and not lines[-1].endswith(b"\n") else b""
    if held and (not data or not b"srun: ".startswith(held[:6])):
        lines.append(held)
        held = b""
    out.write(b"".join(line for line in lines if not noise.fullmatch(line)))
    out.flush()
out.write(held)
out.flush()
code = srun.wait()
sys.exit(128 - code if code < 0 else code)
'''


def exec_command(job_id: str, node: str, python: str, workspace: str, argv: list[str], tty: bool = False) -> str:
    """The login node's command running argv on `node` of the job, in the workspace (the user's home where
    that is gone), with a pseudo-terminal when tty; its exit code is the command's."""
    inner = ["bash", "-c", 'cd "$1" 2>/dev/null || cd; shift; exec "$@"', "devenv", workspace, *argv]
    step = step_command(job_id, node, inner)
    if tty:
        step = step.replace(" --unbuffered --quiet ", " --pty --quiet ", 1)
    return " ".join(shlex.quote(w) for w in [python, "-u", "-c", EXEC_FILTER]) + " " + step


def relay_command(job_id: str, node: str, python: str, port: int) -> str:
    return step_command(job_id, node, [python, "-u", "-c", RELAY, str(int(port))])


def early_relay_command(job_id: str, node: str, python: str, state_file: str, wait_s: float) -> str:
    """A relay started before Jupyter listens: to the port the launcher records in state_file (an absolute path
    on the shared file system), connecting once it answers, within wait_s."""
    if not state_file.startswith("/"):
        raise SettingError("state file", f"'{state_file[:40]}' is not an absolute path", "this is a bug in devenv")
    return step_command(job_id, node, [python, "-u", "-c", RELAY, "0", f"{max(0.0, float(wait_s)):.0f}",
                                       state_file])


PROBE_JOB_NAME = JOB_PREFIX + "check"


def probe_command(settings: SlurmSettings, argv: list[str], wait_s: int = 60, time_limit: str = "00:03:00") -> str:
    """`srun` of one short task on one compute node, asking what an environment job asks (partition, account,
    qos, GPUs, constraint): what `check` sees is what `up` gets. --immediate bounds the wait for a node, so a
    busy queue gives a clear answer instead of a hang; srun cancels its own job when it gives up."""
    s = validate(settings)
    words = ["srun", f"--job-name={PROBE_JOB_NAME}", "--nodes=1", "--ntasks=1", f"--time={check_time(time_limit)}",
             f"--immediate={int(wait_s)}", "--quiet"]
    if s.partition:
        words.append(f"--partition={s.partition}")
    if s.account:
        words.append(f"--account={s.account}")
    if s.qos:
        words.append(f"--qos={s.qos}")
    if s.gpus_per_node:
        words.append(f"--gres=gpu:{s.gpu_type}:{s.gpus_per_node}" if s.gpu_type else f"--gres=gpu:{s.gpus_per_node}")
    if s.constraint:
        words.append(f"--constraint={s.constraint}")
    return " ".join(shlex.quote(w) for w in [*words, "--", *argv])
