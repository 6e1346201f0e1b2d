"""Every command line the README shows, run the way it shows it, against the real test host (issue 28, point 8:
"every command in the README is run by a test"). tests/test_readme_commands.py checks that each names a real
command and real options; this runs them.

README_PLAN has an entry for every command line the README shows (a new one without an entry fails the first
test): RUN with the step below that runs it, or NOT_RUN with why and what stands in. The README's hosts are
the test host (`gpu1`, `a100-box`, `HOST` -> testbox; `~/code/myproj` -> a project folder made here); its
default environment is this test's own (DEVENV_ENV, documented in the README: a slim image and free ports, so
that other tests on the same host are not disturbed). Commands that hold a tunnel or a watch run until the line
that says they work, then get Ctrl-C, as a user ends them. Bounded: one environment, every wait on a line.
"""

from __future__ import annotations

import os
import pty
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from env_testing import EnvUnderTest, test_env  # noqa: F401  (a fixture)
from sshd_fixture import free_port

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from test_readme_commands import _command_lines  # noqa: E402

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[3]

RUN = "run"
GPU = "needs a GPU (the test host has none)"
PROSE = "named in a sentence, without its arguments: its runnable forms are run"
LATER = "not run here yet (README lines of this session's other work); their real run: "
CLUSTER = ("needs a Slurm environment running: tests/integration/slurm/test_slurm_cli_e2e.py and "
           "test_slurm_busy_and_drained.py run up, exec and sanity on the test host's 2-node cluster")

# README line (as tests/test_readme_commands.py reads it, blanks trimmed) -> RUN, or why it is not run here.
README_PLAN: dict[str, str] = {
    "devenv check a100-box": RUN,
    "devenv up a100-box": RUN,
    "devenv sanity a100-box": GPU + ": tests/integration/environments/test_sanity_env.py runs sanity on the test "
                              "host's CPU environment (torch), docs/gpu-proof on an H200",
    "devenv monitor a100-box": RUN,   # the TUI: run as `monitor HOST --once`, one frame of the same data
    'devenv compat --driver 535.104.05 --cuda 12.8 --gpu-name "RTX 5090"': RUN,
    "devenv up gpu1 --sync ~/code/myproj --detach": RUN,
    "devenv exec gpu1 -- python myproj/train.py": RUN,
    "devenv sync gpu1 ~/code/myproj --watch": RUN,
    "devenv check gpu1": RUN,
    "devenv check me@10.0.0.7:2222": RUN,   # the same form, with the test host's address: root@127.0.0.1:2201
    "devenv status @lab": RUN,              # the group the `hosts add --group` step made
    "devenv hosts add NAME --ssh ALIAS [--runtime auto|docker|host] [--group G] [--env ENV]": RUN,
    "devenv hosts list": RUN,
    "devenv hosts rm NAME": RUN,
    "devenv sync gpu1 ~/code/myproj --pull outputs": RUN,
    "devenv code gpu1 --path myproj": RUN,  # no VS Code here: it prints the exact `code --remote` line
    "devenv ssh-config install": RUN,       # on a copy of the ssh config (--yes: no terminal to ask on)
    "devenv ssh-config uninstall": RUN,
    "devenv exec gpu1 -t -- top": RUN,      # in a pseudo-terminal made here; `q` ends top
    "devenv jupyter gpu1 -p 8888": RUN,     # with a port free here instead of 8888 (shared machine)
    "devenv tunnel gpu1 6006": RUN,
    "devenv tunnel gpu1 16006:6006": RUN,   # with a local port free here instead of 16006
    "devenv jupyter": PROSE,
    "devenv tunnel": PROSE,
    "devenv up gpu1": RUN,
    "devenv exec gpu1 --env myproj -- ...": RUN,   # --env naming this test's environment, `-- true` for `...`
    "devenv image prune gpu1 --dry-run": RUN,
    "devenv profiles validate": RUN,
    "devenv check testbox": RUN,
    "devenv up testbox": RUN,
    "devenv sanity testbox": GPU + ": scripts/demo runs it on the test host's CPU image (CI's demo stage)",
    "devenv up HOST --gpus N": GPU + ": tests/integration/environments/test_env_gpu_choice.py picks N free GPUs "
                               "on a host replaying real nvidia-smi answers",
    "devenv status": RUN,
    "devenv up HOST --autostop 90m": ("an idle time of 90 minutes is not waited for in CI: "
                                      "tests/integration/environments/test_env_autostop.py stops a real container "
                                      "after a few idle seconds and up starts it again"),
    "devenv check": PROSE,
    "devenv exec": PROSE,
    "devenv ssh": PROSE,
    "devenv sanity": PROSE,
    "devenv profiles list": RUN,
    "devenv check CLUSTER": RUN,            # the test host's 2-node cluster (a probe job on a node)
    "devenv exec CLUSTER -- CMD": CLUSTER,
    "devenv sanity CLUSTER --nodes N": CLUSTER,
    "devenv compat": PROSE,
    "devenv up CLUSTER": CLUSTER,
    # added to the README by other work of the same session, after this test was written: not run here yet;
    # each names the real test host test that runs it
    "devenv run": PROSE,
    "devenv run gpu1 --name bert -- python myproj/train.py --epochs 3": LATER + "tests/contract/test_runs.py",
    "devenv runs gpu1": LATER + "tests/contract/test_runs.py",
    "devenv runs gpu1 --prune": LATER + "tests/contract/test_runs.py",
    "devenv logs gpu1 --run bert -f": LATER + "tests/contract/test_runs.py",
    "devenv cancel gpu1 bert": LATER + "tests/contract/test_runs.py",
    "devenv down": PROSE,
    "devenv jupyter gpu1 --background": LATER + "tests/integration/environments/test_env_background_tunnels.py",
    "devenv tunnel gpu1 6006 --background": LATER + "tests/integration/environments/test_env_background_tunnels.py",
    "devenv tunnels": LATER + "tests/integration/environments/test_env_background_tunnels.py",
    "devenv tunnels stop ID": LATER + "tests/integration/environments/test_env_background_tunnels.py",
    "devenv gpus @lab": LATER + "tests/integration/test_gpus_fleet.py",
    "devenv gpus HOST...|@group [--timeout S] [--json]": LATER + "tests/integration/test_gpus_fleet.py",
    "devenv image push": PROSE,
    "devenv image push SRC DEST...|@group [--env E] [-j N] [--json]": LATER + "tests/integration/test_image_push.py",
    "devenv image push gpu1 @lab --env cuda": LATER + "tests/integration/test_image_push.py",
    "devenv up @group [--gpus N]": GPU + ": tests/integration/environments/test_env_group_up.py",
    "devenv up @lab --gpus 2": GPU + ": tests/integration/environments/test_env_group_up.py",
    "devenv up HOST --yes": LATER + "tests/integration/test_image_push.py (up --yes pushes, then makes the env)",
    "devenv up HOST --push-from SRC": LATER + "tests/integration/test_image_push.py (--push-from names the source)",
    "devenv up HOST --no-push": LATER + "tests/integration/test_image_push.py (--no-push with --push-from refused)",
    "devenv image push SRC HOST --env E": LATER + "tests/integration/test_image_push.py (the command up names)",
}


def test_every_readme_command_line_is_run_here_or_says_why_not():
    lines = {" ".join(line.split()) for line in _command_lines()}
    assert lines - set(README_PLAN) == set(), "README lines without a plan entry (run them below, or say why not)"
    assert set(README_PLAN) - lines == set(), "plan entries for lines the README no longer shows"


class Held:
    """A devenv command that holds (a tunnel, a watch, a terminal): its output read on a thread."""

    def __init__(self, environ: dict[str, str], *args: str, terminal: bool = False):
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        if terminal:
            primary, secondary = pty.openpty()
            self.proc = subprocess.Popen([sys.executable, "-m", "devenv", *args], stdin=secondary,
                                         stdout=secondary, stderr=secondary, env={**environ, "TERM": "xterm"},
                                         cwd=REPO, start_new_session=True)
            os.close(secondary)
            self._primary = primary
            threading.Thread(target=self._read_pty, daemon=True).start()
        else:
            self.proc = subprocess.Popen([sys.executable, "-m", "devenv", *args], stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environ,
                                         cwd=REPO)
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def _read_pty(self) -> None:
        while True:
            try:
                data = os.read(self._primary, 4096)
            except OSError:
                return
            if not data:
                return
            self.lines.put(data.decode(errors="replace"))

    def type(self, text: str) -> None:
        os.write(self._primary, text.encode())

    def wait_for(self, text: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in chunk for chunk in self.seen) and text not in "".join(self.seen):
            if self.proc.poll() is not None and self.lines.empty():
                raise AssertionError(f"exited {self.proc.returncode} before {text!r}: {''.join(self.seen)}")
            try:
                self.seen.append(self.lines.get(timeout=max(0.1, min(1.0, deadline - time.monotonic()))))
            except queue.Empty:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"not within {timeout:.0f} s: {text!r}: {''.join(self.seen)}")

    def interrupt(self) -> int:
        """Ctrl-C, as a user ends it; its exit code."""
        self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout=60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()

    def finish(self) -> int:
        try:
            return self.proc.wait(timeout=60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()


@pytest.mark.slurm   # `check CLUSTER` submits a probe job: it runs beside the other Slurm tests, never during a drain
def test_the_readme_commands_run_against_the_test_host(test_env, tmp_path):  # noqa: F811
    env: EnvUnderTest = test_env
    env.environ["DEVENV_ENV"] = env.name          # the README's default environment: this test's own
    project = tmp_path / "code" / "myproj"
    project.mkdir(parents=True)
    (project / "train.py").write_text(
        "import os\nhere = os.path.dirname(os.path.abspath(__file__))\n"
        "os.makedirs(os.path.join(here, 'outputs'), exist_ok=True)\n"
        "open(os.path.join(here, 'outputs', 'loss.txt'), 'w').write('0.42\\n')\nprint('trained, loss 0.42')\n")
    ran: set[str] = set()

    def run(readme: str, *args: str, expect: int = 0, **kwargs) -> subprocess.CompletedProcess:
        done = env.run(*args, check=False, **kwargs)
        assert done.returncode == expect, f"README `{readme}` -> {done.returncode}\n{done.stdout}\n{done.stderr}"
        assert "Traceback" not in done.stderr, done.stderr
        ran.add(readme)
        return done

    def held(readme: str, *args: str, until: str, terminal: bool = False) -> Held:
        proc = Held(env.environ, *args, terminal=terminal)
        try:
            proc.wait_for(until)
        except BaseException:
            proc.interrupt()
            raise
        ran.add(readme)
        return proc

    # the first look at a host
    for readme in ("devenv check a100-box", "devenv check gpu1", "devenv check testbox"):
        run(readme, "check", "testbox")                     # warns (no GPU driver there): exit 0
    by_address = tmp_path / "ssh_config_by_address"   # the user's key for that address, as a user's config has
    by_address.write_text(f"Host 127.0.0.1\n  IdentityFile {Path(env.environ['DEVENV_SSH_CONFIG']).parent}/id_ed25519\n"
                          f"  IdentitiesOnly yes\n\n" + Path(env.environ["DEVENV_SSH_CONFIG"]).read_text())
    run("devenv check me@10.0.0.7:2222", "check", "root@127.0.0.1:2201",
        extra_env={"DEVENV_SSH_CONFIG": str(by_address)})
    done = run('devenv compat --driver 535.104.05 --cuda 12.8 --gpu-name "RTX 5090"', "compat", "--driver",
               "535.104.05", "--cuda", "12.8", "--gpu-name", "RTX 5090")
    assert "535.104.05" in done.stdout + done.stderr

    # the loop: up with the project, run it, bring its outputs back, keep editing
    run("devenv up gpu1 --sync ~/code/myproj --detach", "up", "testbox", "--sync", str(project), "--detach",
        timeout=600)
    done = run("devenv exec gpu1 -- python myproj/train.py", "exec", "testbox", "--", "python", "myproj/train.py")
    assert "trained, loss 0.42" in done.stdout
    run("devenv sync gpu1 ~/code/myproj --pull outputs", "sync", "testbox", str(project), "--pull", "outputs")
    assert (project / "outputs" / "loss.txt").read_text() == "0.42\n"
    watch = held("devenv sync gpu1 ~/code/myproj --watch", "sync", "testbox", str(project), "--watch",
                 until="Ctrl-C stops")
    (project / "model.py").write_text("print('edited')\n")
    watch.wait_for("model.py")
    assert watch.interrupt() in (0, 130)
    done = run("devenv exec gpu1 --env myproj -- ...", "exec", "testbox", "--env", env.name, "--", "python",
               "myproj/model.py")
    assert "edited" in done.stdout                        # the watch's edit arrived

    top = held("devenv exec gpu1 -t -- top", "exec", "testbox", "-t", "--", "top", until="load average",
               terminal=True)
    top.type("q")
    assert top.finish() == 0

    # ports
    local = free_port()
    jupyter = held("devenv jupyter gpu1 -p 8888", "jupyter", "testbox", "-p", str(local),
                   until=f"http://127.0.0.1:{local}/")
    assert jupyter.interrupt() in (0, 130)
    tunnel = held("devenv tunnel gpu1 6006", "tunnel", "testbox", "6006", until="6006")
    assert tunnel.interrupt() in (0, 130)
    local = free_port()
    tunnel = held("devenv tunnel gpu1 16006:6006", "tunnel", "testbox", f"{local}:6006", until=str(local))
    assert tunnel.interrupt() in (0, 130)
    for readme in ("devenv up a100-box", "devenv up gpu1", "devenv up testbox"):   # reattach, hold the tunnel
        up = held(readme, "up", "testbox", until="http://127.0.0.1:")
        assert up.interrupt() in (0, 130)

    # what runs, and the other commands of the README. `status` asks every host profile: the test host's
    # testbox-nodocker is made to be refused by Docker (its own tests), which is exit 1 for all; this home lacks it
    (env.home / "profiles" / "hosts" / "testbox-nodocker.yaml").unlink()
    done = run("devenv status", "status")
    assert env.name in done.stdout
    done = run("devenv code gpu1 --path myproj", "code", "testbox", "--path", "myproj",
               extra_env={"PATH": "/usr/bin:/bin"})
    assert "code --remote" in done.stdout + done.stderr
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text(Path(env.environ["DEVENV_SSH_CONFIG"]).read_text())
    copy = {"DEVENV_SSH_CONFIG": str(ssh_config)}
    run("devenv ssh-config install", "ssh-config", "install", "--yes", extra_env=copy)
    assert ssh_config.read_text().startswith("Include ")
    run("devenv ssh-config uninstall", "ssh-config", "uninstall", extra_env=copy)
    assert not ssh_config.read_text().startswith("Include ")
    run("devenv hosts add NAME --ssh ALIAS [--runtime auto|docker|host] [--group G] [--env ENV]", "hosts", "add",
        "readme-box", "--ssh", "testbox", "--runtime", "docker", "--group", "readme", "--env", env.name)
    done = run("devenv hosts list", "hosts", "list")
    assert "readme-box" in done.stdout
    done = run("devenv status @lab", "status", "@readme")
    assert env.name in done.stdout
    run("devenv hosts rm NAME", "hosts", "rm", "readme-box")
    run("devenv profiles validate", "profiles", "validate")
    run("devenv profiles list", "profiles", "list")
    run("devenv image prune gpu1 --dry-run", "image", "prune", "testbox", "--dry-run")
    run("devenv monitor a100-box", "monitor", "testbox", "--once")
    run("devenv check CLUSTER", "check", "testcluster", timeout=300)

    asked = {line for line, plan in README_PLAN.items() if plan == RUN}
    assert asked - ran == set(), "planned as run, but not run"
