"""L1: environments on hosts without Docker (`runtime: host`): Jupyter started detached with the host's python.

Everything lives under ~/.devenv/envs/<owner>-<env>/ on the host, which is the truth as labels are for
containers: state.json (env, owner, spec and its hash, pid, port), the 0600 token file, the Jupyter config
that reads it, and jupyter.log. Jupyter listens on the host's 127.0.0.1 only; the host's own sshd serves
`devenv ssh` (no second sshd). Small python scripts run on the host over the connection; their arguments
are never secrets (the token travels with put(), on stdin).
"""

from __future__ import annotations

import base64
import json
import re
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

from devenv.config.profiles import HostProfile
from devenv.env import jupyter_scripts
from devenv.errors import CommandFailed, DevenvError
from devenv.remote.base import Connection, Result

ROOT = "~/.devenv/envs"
WORKSPACES = "~/devenv-workspaces"

_JUPYTER_CONFIG = """\
# devenv: Jupyter on this host's loopback behind a token read from a 0600 file (never argv or env).
import os
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "jupyter_token")) as f:
    token = f.read().strip()
if len(token) < 32:
    raise SystemExit("devenv: no Jupyter token; refusing to start an open server")
c = get_config()  # noqa: F821
c.IdentityProvider.token = token
c.ServerApp.ip = "127.0.0.1"
c.ServerApp.port_retries = 0
c.ServerApp.open_browser = False
c.ServerApp.allow_root = True   # whoever devenv logs in as (root on many GPU boxes) runs the user's Jupyter
"""

# Runs on the host: pick the port (preferred if free), start Jupyter in its own session with its output in
# the log, record state.json, with the GPUs it may see (state["gpus"]). argv: dir python workspace
# preferred_port state_json
_LAUNCH = r"""
import json, os, socket, subprocess, sys, time
d, python, workspace = sys.argv[1:4]
preferred, state = int(sys.argv[4]), json.loads(sys.argv[5])
environ = dict(os.environ)
gpus = state.get("gpus", "all")
if gpus != "all":
    environ.update(CUDA_DEVICE_ORDER="PCI_BUS_ID", CUDA_VISIBLE_DEVICES="" if gpus == "none" else gpus)
""" + jupyter_scripts.FREE_PORT + r"""port = free(preferred) or free(0)
os.makedirs(workspace, exist_ok=True)
log = open(os.path.join(d, "jupyter.log"), "ab")
proc = subprocess.Popen([python, "-m", "jupyterlab", "--config=" + os.path.join(d, "jupyter_server_config.py"),
                         "--ServerApp.port=%d" % port, "--ServerApp.root_dir=" + workspace],
                        stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=workspace, start_new_session=True,
                        env=environ, pass_fds=[s.fileno() for s in held])
state.update(pid=proc.pid, port=port, started_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
             workspace=workspace, preferred_port=preferred)
tmp = os.path.join(d, "state.json.tmp")
with open(tmp, "w") as f:
    json.dump(state, f)
os.replace(tmp, os.path.join(d, "state.json"))
print(json.dumps(state))
"""

# Runs on the host: every env's state.json with whether its pid is still our Jupyter.
_LIST = r"""
import glob, json, os, sys
out = []
for path in sorted(glob.glob(os.path.expanduser(sys.argv[1]) + "/*/state.json")):
    try:
        state = json.load(open(path))
    except (OSError, ValueError):
        continue
    alive = False
    try:
        cmd = open("/proc/%d/cmdline" % int(state.get("pid", 0)), "rb").read().replace(b"\0", b" ")
        alive = b"jupyterlab" in cmd and os.path.dirname(path).encode() in cmd
    except (OSError, ValueError):
        pass
    state["alive"] = alive
    state["dir"] = os.path.dirname(path)
    out.append(state)
print(json.dumps(out))
"""

_PROBE = jupyter_scripts.PROBE


@dataclass(frozen=True)
class PreparedFiles:
    """What prepare_in_one found: the python's facts, the token in force, and $HOME there."""
    facts: dict[str, Any]
    token: str
    home: str


class HostRuntime:
    kind = "host"

    def __init__(self, conn: Connection, host: HostProfile):
        self.conn = conn
        self.host = host.name
        self.python = host.python

    def close(self) -> None:
        """Nothing of its own to close: the connection belongs to the pool."""

    def env_dir(self, key: str) -> str:
        return f"{ROOT}/{key}"

    def workspace(self, env_name: str) -> str:
        return f"{WORKSPACES}/{env_name}"

    # --- facts -----------------------------------------------------------------------------------------

    def python_facts(self) -> dict[str, Any]:
        """{"python": version, "jupyterlab": version or None} of the profile's python on the host."""
        script = ("import json, sys\ntry:\n import jupyterlab; jl = jupyterlab.__version__\n"
                  "except Exception:\n jl = None\n"
                  "print(json.dumps({'python': sys.version.split()[0], 'jupyterlab': jl}))")
        result = self.conn.run(f"{shlex.quote(self.python)} -", stdin=script, timeout=60)
        if not result.ok:
            raise DevenvError(f"python '{self.python}' does not run on {self.host}: "
                              f"{(result.stderr or result.stdout).strip().splitlines()[-1:] or ['no output']}",
                              "set `python:` in the host profile to a python that exists there (e.g. a venv's "
                              "bin/python)")
        return cast(dict[str, Any], json.loads(result.stdout.strip().splitlines()[-1]))

    def list_states(self) -> list[dict[str, Any]]:
        result = self._python(_LIST, ROOT)
        return json.loads(result.stdout.strip().splitlines()[-1]) if result.stdout.strip() else []

    def state(self, key: str) -> dict[str, Any] | None:
        return next((s for s in self.list_states() if s.get("dir", "").endswith("/" + key)), None)

    # --- lifecycle -------------------------------------------------------------------------------------

    def prepare(self, key: str, token: str) -> None:
        """The env's dir (0700), its token (0600) and the Jupyter config that reads it."""
        directory = self.env_dir(key)
        self.conn.run(f"mkdir -p {_home(directory)} && chmod 700 {_home(directory)}", check=True, timeout=30)
        self.conn.put(token.encode() + b"\n", f"{directory}/jupyter_token", 0o600)
        self.conn.put(_JUPYTER_CONFIG.encode(), f"{directory}/jupyter_server_config.py", 0o600)

    def prepare_in_one(self, key: str, workspace: str, new_token: str, facts_script: str,
                       files: dict[str, bytes], check_facts: Callable[[dict[str, Any]], None]) -> PreparedFiles:
        """prepare() and more in ONE round trip (a job's start waits on every one): facts_script run by the
        profile's python prints one JSON line, which check_facts judges (a non-zero exit stops the script there:
        nothing written); then the env's dir (0700), its token (the one there if valid, else new_token; 0600),
        the Jupyter config, `files` (name -> bytes, 0600) and the workspace. Contents travel base64 on stdin,
        one per line (never argv: the token is a secret)."""
        directory = _home(self.env_dir(key))
        names = list(files)
        for name in names:
            if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
                raise DevenvError(f"bad file name {name!r}", "this is a bug in devenv")
        writes = "".join(f'read -r b; put "$d"/{shlex.quote(n)} "$b" || exit 5\n' for n in names)
        script = (
            f"facts=$({shlex.quote(self.python)} -c {shlex.quote(facts_script)} 2>&1); rc=$?; "
            'printf "%s\\n" "$facts"; [ $rc -eq 0 ] || exit 4\n'
            "umask 077; put() { printf %s \"$2\" | base64 -d > \"$1.tmp\" && mv -f \"$1.tmp\" \"$1\"; }\n"
            f'd={directory}; mkdir -p "$d" && chmod 700 "$d" || exit 5\n'
            'read -r b; t=$(cat "$d"/jupyter_token 2>/dev/null | tr -d "[:space:]"); '
            'if [ ${#t} -lt 32 ]; then put "$d"/jupyter_token "$b" || exit 5; t=; fi\n'
            'read -r b; put "$d"/jupyter_server_config.py "$b" || exit 5\n'
            f"{writes}"
            f"mkdir -p {_home(workspace)} || exit 5\n"
            'printf "devenv-token %s\\ndevenv-home %s\\n" "$t" "$HOME"\n')
        lines = [new_token.encode() + b"\n", _JUPYTER_CONFIG.encode()] + [files[n] for n in names]
        data = b"".join(base64.b64encode(b) + b"\n" for b in lines)
        result = self.conn.run(script, stdin=data, timeout=90)
        out = result.stdout.splitlines()
        facts_line = next((ln for ln in out if ln.startswith("{")), None)
        facts = json.loads(facts_line) if facts_line else {}
        if facts_line:
            check_facts(facts)      # e.g. no JupyterLab: its own message (facts_script exits non-zero then)
        if result.exit_code == 4 or not facts_line:
            said = [ln for ln in out if ln.strip()] or [result.stderr.strip() or f"exit code {result.exit_code}"]
            raise DevenvError(f"python '{self.python}' does not run on {self.host}: {said[-1]}",
                              "set `python:` in the host profile to a python the login and compute nodes share "
                              "(e.g. a venv's bin/python on the shared file system)")
        found = dict(ln.split(" ", 1) for ln in out if ln.startswith("devenv-") and " " in ln)
        if not result.ok or "devenv-home" not in found:
            raise DevenvError(f"cannot write the environment's files in {self.env_dir(key)} on {self.host}: "
                              f"{result.stderr.strip() or f'exit code {result.exit_code}'}",
                              f"check that {self.host}'s home directory is writable (and not full)")
        return PreparedFiles(facts, found.get("devenv-token", "").strip() or new_token, found["devenv-home"])

    def read_token(self, key: str) -> str | None:
        result = self.conn.run(f"cat {_home(self.env_dir(key))}/jupyter_token", timeout=30)
        token = result.stdout.strip() if result.ok else ""
        return token if len(token) >= 32 else None

    def launch(self, key: str, env_name: str, preferred_port: int, state: dict[str, Any]) -> dict[str, Any]:
        home = self.conn.run("printf %s \"$HOME\"", check=True, timeout=30).stdout.strip()
        directory = self.env_dir(key).replace("~", home, 1)
        workspace = self.workspace(env_name).replace("~", home, 1)
        result = self._python(_LAUNCH, directory, self.python, workspace, str(preferred_port), json.dumps(state))
        return cast(dict[str, Any], json.loads(result.stdout.strip().splitlines()[-1]))

    def probe(self, port: int) -> tuple[bool, str]:
        result = self.conn.run(f"{shlex.quote(self.python)} - {int(port)}", stdin=_PROBE, timeout=30)
        return result.ok, (result.stdout + result.stderr).strip()

    def stop(self, state: dict[str, Any]) -> None:
        """TERM the Jupyter's process group (it has its own session), then KILL what is left after 5 s."""
        pid = int(state.get("pid") or 0)
        if pid <= 1 or not state.get("alive"):
            return
        self.conn.run(f"kill -TERM -- -{pid} 2>/dev/null; for i in 1 2 3 4 5 6 7 8 9 10; do "
                      f"kill -0 {pid} 2>/dev/null || exit 0; sleep 0.5; done; kill -KILL -- -{pid} 2>/dev/null; true",
                      timeout=30)

    def remove(self, key: str, env_name: str, purge: bool) -> list[str]:
        removed = [self.env_dir(key)]
        paths = [_home(self.env_dir(key))]
        if purge:
            paths.append(_home(self.workspace(env_name)))
            removed.append(self.workspace(env_name))
        self.conn.run("rm -rf -- " + " ".join(paths), check=True, timeout=60)
        return removed

    def logs(self, key: str, tail: int | str = 200, follow: bool = False) -> Iterator[str]:
        log = f"{_home(self.env_dir(key))}/jupyter.log"
        count = "+1" if tail == "all" else str(int(tail))
        if follow:
            yield from self.conn.stream(f"tail -n {count} -F {log}")
            return
        result = self.conn.run(f"tail -n {count} {log}", timeout=60)
        yield from result.stdout.splitlines()

    def exec_line(self, env_name: str, argv: list[str], gpus: str = "all") -> str:
        """The host's shell line running argv in the workspace with the profile's python first on PATH, seeing
        the env's GPUs only (a missing command: the shell's one line and 127)."""
        bindir = f"$(dirname $(command -v {shlex.quote(self.python)}))"
        return (f"cd {_home(self.workspace(env_name))} 2>/dev/null || cd; PATH={bindir}:$PATH; "
                + cuda_visible_prefix(gpus) + " ".join(shlex.quote(a) for a in argv))

    def _python(self, script: str, *args: str) -> Result:
        argv = " ".join(shlex.quote(a) for a in args)
        try:
            return self.conn.run(f"{shlex.quote(self.python)} - {argv}", stdin=script, timeout=60, check=True)
        except CommandFailed as exc:
            raise DevenvError(f"devenv's helper failed on {self.host}: {exc.message}",
                              "check the host's python (`python:` in the host profile)") from None


def cuda_visible_prefix(gpus: str) -> str:
    """`export ...; ` limiting CUDA to the env's GPUs, in nvidia-smi's (PCI bus) order: CUDA's own default order,
    fastest first, would give index 1 another GPU than nvidia-smi's 1. all: nothing; none: no GPU."""
    if gpus == "all":
        return ""
    if gpus != "none" and not all(part.isdigit() for part in gpus.split(",")):
        raise DevenvError(f"internal: GPU list '{gpus[:16]}' is not indices")
    return f"export CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES={'' if gpus == 'none' else gpus}; "


def _home(path: str) -> str:
    """A ~/ path for the remote shell: $HOME expanded there, the rest quoted."""
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)
