"""Autostop on the host side (L2): the watcher (autostop_watcher.py) armed beside an environment, and its state
read back for `status`.

Each armed environment has ~/.devenv/autostop/OWNER-ENV/ on the host devenv connects to (0700): the watcher's
copy, its config.json and the Jupyter token it reads (0600 each, carried on stdin, never argv), its pid, its log
and state.json, which the watcher rewrites every sample (idle for, stops in, each signal, GPU-seconds, and once
it acted: why). A backend says what its watcher watches and does (AutostopPlan); arming, disarming and reading
are the same for every backend and take one round trip each.
"""

from __future__ import annotations

import base64
import json
import re
import shlex
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Any

from devenv.config.autostop import Autostop
from devenv.errors import DevenvError

if TYPE_CHECKING:
    from devenv.remote.base import Connection

ROOT = "~/.devenv/autostop"


@dataclass(frozen=True)
class AutostopPlan:
    """What one environment's watcher watches, and what it does when the window ends (from its backend)."""

    key: str                            # OWNER-ENV: the watcher's folder
    python: str                         # the host's python that runs the watcher
    sessions: dict[str, Any]            # {"kind": "container", "container_id": ID} | {"kind": "host", "uid": "self"}
    gpus: str                           # the environment's GPUs: "all", "0,1", or "none" (no GPU signal)
    runs_dir: str | None                # where its detached runs are, as the environment sees it
    stop_steps: list[dict[str, Any]]    # the action `stop`: {"argv": [...]} | {"killpg": PID}
    down_steps: list[dict[str, Any]]    # the action `down`
    hook_prefix: list[str]              # the hook runs as hook_prefix + [sh, -c, HOOK] (in the environment)
    jupyter_port: int | None = None
    token: str | None = None            # Jupyter's token, copied 0600 beside the config
    token_file: str | None = None       # ... or where the environment keeps it on the host
    runs_exec: list[str] = field(default_factory=list)   # how to ask inside when the runs cannot be read
    hook_cwd: str | None = None
    alive_pid: int | None = None        # a bare host's Jupyter: once it is gone, the watcher ends
    job_id: str | None = None           # a Slurm job: the watcher waits in it for a config naming this job
    in_environment: bool = False        # the environment starts the watcher itself (a Slurm job's launcher)
    ends_itself: bool = False           # the action ends the watcher too (its state is written first)


def config_of(plan: AutostopPlan, setting: Autostop, owner: str, env_name: str) -> dict[str, Any]:
    """The watcher's config.json (every path under ~ is expanded by the watcher)."""
    folder = f"{ROOT}/{plan.key}"
    jupyter = None
    if plan.jupyter_port:
        jupyter = {"port": plan.jupyter_port,
                   "token_file": plan.token_file or f"{folder}/jupyter_token"}
    hook = None
    if setting.hook:
        hook = [*plan.hook_prefix, "sh", "-c", setting.hook]
    return {"env": env_name, "owner": owner, "idle_s": setting.idle_s, "interval_s": setting.sample_s,
            "gpu_threshold": setting.gpu_threshold, "gpus": plan.gpus, "sessions": plan.sessions,
            "runs_dir": plan.runs_dir, "runs_exec": plan.runs_exec, "jupyter": jupyter,
            "state_file": f"{folder}/state.json", "action": setting.action,
            "action_steps": plan.stop_steps if setting.action == "stop" else plan.down_steps,
            "hook_argv": hook, "hook_cwd": plan.hook_cwd, "alive_pid": plan.alive_pid, "job_id": plan.job_id,
            "ends_itself": plan.ends_itself}


def watcher_source() -> bytes:
    return resources.files("devenv.services.environments").joinpath("autostop_watcher.py").read_bytes()


def _check_key(key: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,200}", key):
        raise DevenvError(f"bad autostop key {key!r}", "this is a bug in devenv")
    return key


# Ends the watcher in $d (its pid file names it; only a process running the watcher is signalled).
_END_OLD = ('if [ -f "$d/pid" ]; then read -r p < "$d/pid"; '
            'if [ -n "$p" ] && grep -q autostop_watcher "/proc/$p/cmdline" 2>/dev/null; then kill "$p"; fi; fi\n')


def arm(conn: Connection, plan: AutostopPlan, setting: Autostop, owner: str, env_name: str) -> None:
    """(Re)start the environment's watcher, detached (setsid nohup), with its config; the idle clock starts at
    zero. One round trip; contents travel base64 on stdin, one per line. Where the environment runs the
    watcher itself (in_environment: a Slurm job), only the files are written: the watcher there sees its new
    config and starts over with it."""
    key = _check_key(plan.key)
    files = [("autostop_watcher.py", watcher_source()),
             ("config.json", json.dumps(config_of(plan, setting, owner, env_name)).encode())]
    if plan.token and not plan.token_file:
        files.append(("jupyter_token", plan.token.encode() + b"\n"))
    writes = "".join(f'read -r b; put "$d"/{name} "$b" || exit 5\n' for name, _ in files)
    python = shlex.quote(plan.python)
    start = ('rm -f "$d/state.json" "$d/pid"\n' if plan.in_environment else
             f'rm -f "$d/state.json"; command -v {python} >/dev/null 2>&1 || exit 7\n'
             f'setsid nohup {python} "$d/autostop_watcher.py" "$d/config.json" </dev/null >>"$d/watcher.log" 2>&1 &\n'
             'echo $! > "$d/pid"\n')
    script = (f'd={ROOT.replace("~", "$HOME", 1)}/{key}; mkdir -p "$d" && chmod 700 "$d" || exit 5\n'
              + _END_OLD +
              "umask 077; put() { printf %s \"$2\" | base64 -d > \"$1.tmp\" && mv -f \"$1.tmp\" \"$1\"; }\n"
              + writes + start)
    data = b"".join(base64.b64encode(content) + b"\n" for _, content in files)
    result = conn.run(script, stdin=data, timeout=60)
    if result.exit_code == 7:
        raise DevenvError(f"autostop needs a python on the host to run its watcher, and {plan.python} is not "
                          "there", "install python3 on the host (or set `python:` in its host profile), or run "
                          "`devenv up` with --no-autostop")
    if not result.ok:
        raise DevenvError(f"cannot start the autostop watcher: {result.stderr.strip() or result.exit_code}",
                          "check that the host's home directory is writable")


def disarm(conn: Connection, key: str) -> bool:
    """End the watcher and forget its state (up --no-autostop, down); True when one was armed."""
    key = _check_key(key)
    script = (f'd={ROOT.replace("~", "$HOME", 1)}/{key}; [ -d "$d" ] || exit 3\n' + _END_OLD
              + 'rm -rf "$d"\n')
    return conn.run(script, timeout=30).exit_code == 0


# One line per armed environment: KEY ALIVE STATE_JSON (state.json is one line).
_READ = (f'for d in {ROOT.replace("~", "$HOME", 1)}/*/; do d=${{d%/}}; [ -f "$d/state.json" ] || continue; a=0; '
         'if [ -f "$d/pid" ]; then read -r p < "$d/pid"; '
         'grep -q autostop_watcher "/proc/$p/cmdline" 2>/dev/null && a=1; fi; '
         'printf "%s %s %s\\n" "${d##*/}" "$a" "$(head -c 65536 "$d/state.json")"; done; true')


def read_states(conn: Connection) -> dict[str, dict[str, Any]]:
    """KEY -> the watcher's state (with "watcher_alive"), for every environment armed on the host."""
    result = conn.run(_READ, timeout=30)
    return parse_states(result.stdout)


def parse_states(text: str) -> dict[str, dict[str, Any]]:
    states: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        parts = line.split(" ", 2)
        if len(parts) < 3:
            continue
        try:
            state = json.loads(parts[2])
        except ValueError:
            continue
        if isinstance(state, dict):
            state["watcher_alive"] = parts[1] == "1"
            states[parts[0]] = state
    return states


def summary(state: dict[str, Any], running: bool) -> dict[str, Any]:
    """What status shows and --json carries of one environment's watcher (None-free, plain data)."""
    window = float(state.get("window_s") or 0)
    stops_in = float(state.get("stops_in_s") or 0)
    phase = state.get("state", "watching")
    if phase == "ended" or (phase == "watching" and not state.get("watcher_alive")):
        phase = "not watching"        # the watcher is gone (a host reboot): nothing will stop it
    if phase in ("stopped", "stopping") and running:
        phase = "not watching"        # brought back by an `up` that did not arm autostop again
    if phase == "watching" and not running:
        phase = "not watching"        # what it watched is not running (a Slurm job that ended otherwise)
    unknown = {name: s.get("said", "") for name, s in (state.get("signals") or {}).items()
               if s.get("state") == "unknown"}
    return {"state": phase, "window_s": window, "idle_for_s": float(state.get("idle_for_s") or 0),
            "stops_in_s": stops_in, "warning": phase == "watching" and window > 0 and stops_in < window / 10,
            "held_by": list(state.get("held_by") or []), "unknown": unknown, "action": state.get("action"),
            "reason": state.get("reason") or "", "active_gpu_s": float(state.get("active_gpu_s") or 0),
            "idle_gpu_s": float(state.get("idle_gpu_s") or 0), "updated_at": state.get("updated_at")}


def row_words(summary_: dict[str, Any] | None) -> str:
    """An environment's autostop in a row's few words (the TUI's env line): "stops in 23 m", "stopped: idle 90 m",
    "autostop: stopping"; "" where nothing watches it."""
    from devenv.config.autostop import describe_window

    if not summary_:
        return ""
    phase = summary_.get("state")
    if phase == "watching":
        return f"stops in {describe_window(float(summary_.get('stops_in_s') or 0))}"
    if phase == "stopped":
        return f"stopped: {summary_.get('reason') or 'idle'}"
    return "autostop: stopping" if phase == "stopping" else ""
