"""Detached runs (L0: text and parsing only): the POSIX sh that starts, supervises, lists, reads and cancels a
run on the host side, and the model of what it reports.

A run lives in a folder of its own under the environment's runs folder (in the workspace, so it outlives a
container restart): `meta.json` (one line, written at start: id, name, argv, env, gpus), `pid` ("SUPERVISOR
STARTTIME PGID EPOCH", once the supervisor runs), `log` (the command's stdout and stderr, as they come),
`cancelled` (a cancel asked for it) and `exit` ("CODE EPOCH", once it ended). Nothing but sh and coreutils is
needed there; the supervisor is a copy of SUPERVISOR in the runs folder, started with setsid + nohup so that it
outlives the connection that started it. The command runs in a session (and process group) of its own, so a
cancel reaches its whole tree; it is passed as argv (`exec "$@"`), never through a shell unless the user wrote one.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from devenv.env.durations import compact_duration
from devenv.env.procgroup import GROUP_ALIVE
from devenv.errors import BadInput

RUNS_FOLDER = ".devenv/runs"      # under the workspace
CANCEL_GRACE_S = 10               # SIGTERM, then SIGKILL after this long
LOG_CHUNK = 1 << 20               # the most one read of a log brings back
FOLLOW_WAIT_S = 2.0               # how long one read waits on the host for new output before answering
ID_RE = re.compile(r"[0-9a-f]{4,16}")
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
THEN_ACTIONS = ("stop", "down")

# The state of a run's folder $1, as one word on stdout: running | exited | lost | starting. A run whose
# supervisor is gone (a host reboot, a container restart, a job that ended) without writing `exit` is lost: the
# supervisor is known by its pid *and* its start time, since pids are reused (a restarted container starts at 1);
# a zombie is gone too. Shared by the scripts below.
_STATE = r'''
state_of() {
  sd=$1
  if [ -e "$sd/exit" ]; then echo exited; return; fi
  if [ ! -e "$sd/pid" ]; then echo starting; return; fi
  read -r sup st pg ep < "$sd/pid"
  if [ -r "/proc/$sup/stat" ]; then
    read -r line < "/proc/$sup/stat" || line=""
    rest=${line##*) }
    set -- $rest
    if [ "$1" != Z ] && [ "${20}" = "$st" ]; then echo running; return; fi
  fi
  if [ -e "$sd/exit" ]; then echo exited; return; fi
  echo lost
}
runs_home() {
  case $1 in "~/"*) printf '%s/%s' "$HOME" "${1#"~/"}";; *) printf '%s' "$1";; esac
}
'''

# The supervisor: sh SUPERVISOR DIR THEN_N THEN... -- CMD...; runs CMD in its own session with its output in
# DIR/log, records the pids first and the exit code last, then runs the THEN command (the backend's stop/down).
SUPERVISOR = r'''#!/bin/sh
# devenv's run supervisor (a copy, written by `devenv run`): records the run in its folder, see devenv/env/runs.py
dir=$1; n=$2; shift 2
then=""
while [ "$n" -gt 0 ]; do then="$then '$(printf %s "$1" | sed "s/'/'\\\\''/g")'"; shift; n=$((n - 1)); done
[ "$1" = "--" ] && shift
starttime() { read -r l < "/proc/$1/stat"; l=${l##*) }; set -- $l; echo "${20}"; }
me=$$
trap '' HUP
setsid -w sh -c 'printf "%s %s %s %s\n" "$1" "$2" "$$" "$(date +%s)" > "$0/pid.tmp" && mv "$0/pid.tmp" "$0/pid"
  [ -e "$0/cancelled" ] && exit 143
  shift 2; exec "$@"' "$dir" "$me" "$(starttime $me)" "$@" </dev/null >>"$dir/log" 2>&1
code=$?
printf '%s %s\n' "$code" "$(date +%s)" > "$dir/exit.tmp" && mv "$dir/exit.tmp" "$dir/exit"
# someone follows the log (READ or `run --follow` marks `following`): the action waits (15 s at most) until the
# follower has the log's end (SEEN marks `seen`), since stopping the environment would cut it off before that
if [ -n "$then" ] && [ -e "$dir/following" ]; then
  i=0; while [ ! -e "$dir/seen" ] && [ "$i" -lt 300 ]; do sleep 0.05; i=$((i + 1)); done
fi
if [ -n "$then" ]; then eval "set -- $then"; "$@" >>"$dir/then.log" 2>&1; fi
'''

# sh -c LAUNCH devenv-run RUNS ID META SUPERVISOR FOLLOWING WRAP_N WRAP... THEN_N THEN... -- CMD...: the run's
# folder and its meta (FOLLOWING=1: the caller follows the log from the start, so --then waits for it), the
# supervisor copied in, started detached (under WRAP: [] in place, srun on a Slurm job), its id printed.
LAUNCH = _STATE + r'''
R=$(runs_home "$1"); id=$2; meta=$3; supervisor=$4; following=$5; shift 5
mkdir -p "$R" && chmod 700 "$R" && mkdir "$R/$id" || { echo "devenv: cannot make the run folder $R/$id" >&2; exit 90; }
d="$R/$id"
printf '%s\n' "$meta" > "$d/meta.json"
: > "$d/log"
[ "$following" = 1 ] && : > "$d/following"
printf '%s' "$supervisor" > "$d/supervise.sh"
command -v setsid >/dev/null || { echo "devenv: setsid is not installed here (util-linux)" >&2; exit 91; }
n=$1; shift; wrap=""
while [ "$n" -gt 0 ]; do wrap="$wrap '$(printf %s "$1" | sed "s/'/'\\\\''/g")'"; shift; n=$((n - 1)); done
eval "set -- $wrap sh \"\$d/supervise.sh\" \"\$d\" \"\$@\""
setsid nohup "$@" </dev/null >/dev/null 2>&1 &
echo "$id"
'''

# sh -c LIST devenv-runs RUNS: every run's files, as `grep -H` prints them (PATH:LINE), then for each run that
# has not ended its state (PATH/state:WORD). One grep for the files, the shell's builtins for the rest: a
# thousand finished runs cost one process.
LIST = _STATE + r'''
R=$(runs_home "$1")
[ -d "$R" ] || exit 0
cd "$R" || exit 0
set -- */meta.json
[ -e "$1" ] || exit 0
grep -H '' */meta.json */exit */cancelled 2>/dev/null
for m in */meta.json; do
  d=${m%/meta.json}
  [ -e "$d/exit" ] && continue
  printf '%s/state:%s\n' "$d" "$(state_of "$d")"
done
exit 0
'''

# sh -c READ devenv-log RUNS ID OFFSET MAX WAIT: waits up to WAIT steps of 0.05 s for the log to grow past OFFSET
# (or the run to end), then prints "STATE SIZE CODE" (CODE: the exit code once ended, else -) and the bytes from
# OFFSET (at most MAX), base64: binary output and lines without an end come through as they are. The state is
# taken before the size: an ended run's log is complete.
READ = _STATE + r'''
R=$(runs_home "$1"); d="$R/$2"; off=$3; max=$4; waits=$5
[ -d "$d" ] || { echo "nosuch 0"; exit 0; }
[ -e "$d/following" ] || : > "$d/following"
i=0
while :; do
  s=$(state_of "$d")
  size=$(wc -c < "$d/log" 2>/dev/null || echo 0)
  [ "$size" -gt "$off" ] && break
  [ "$s" = running ] || [ "$s" = starting ] || break
  [ "$i" -ge "$waits" ] && break
  sleep 0.05; i=$((i + 1))
done
code=-
if [ "$s" = exited ]; then
  read -r code ended < "$d/exit"
  [ -e "$d/cancelled" ] && s=killed
fi
echo "$s $size $code"
[ "$size" -gt "$off" ] && tail -c +"$((off + 1))" "$d/log" | head -c "$max" | base64
exit 0
'''

# sh -c CANCEL devenv-cancel RUNS ID GRACE: SIGTERM to the run's process group, SIGKILL after GRACE s if it is
# still there, then the run's end as the supervisor records it: prints the state before and the exit line after.
CANCEL = _STATE + GROUP_ALIVE + r'''
R=$(runs_home "$1"); d="$R/$2"; grace=$3
[ -d "$d" ] || { echo "nosuch"; exit 0; }
s=$(state_of "$d")
echo "$s"
case $s in running|starting) ;; *) exit 0;; esac
echo 1 > "$d/cancelled"
[ -e "$d/pid" ] || exit 0
read -r sup st pg ep < "$d/pid"
kill -s TERM -- -"$pg" 2>/dev/null
i=0
while group_alive "$pg" && [ "$i" -lt "$((grace * 20))" ]; do sleep 0.05; i=$((i + 1)); done
group_alive "$pg" && { kill -s KILL -- -"$pg" 2>/dev/null; echo killed; }
i=0
while [ ! -e "$d/exit" ] && [ "$i" -lt 100 ]; do
  [ "$(state_of "$d")" = lost ] && break
  sleep 0.05; i=$((i + 1))
done
exit 0
'''

# sh -c SEEN devenv-seen RUNS ID: the follower has the log's end (what `--then` waits for, 15 s at most): said by
# the follower once its last read came back, so that stopping the environment cannot cut that read off.
SEEN = _STATE + r'''
R=$(runs_home "$1"); [ -d "$R/$2" ] && : > "$R/$2/seen"
exit 0
'''

# sh -c PRUNE devenv-prune RUNS: removes the folders of runs that ended (exit written); prints how many.
PRUNE = r'''
case $1 in "~/"*) R="$HOME/${1#"~/"}";; *) R=$1;; esac
n=0
for e in "$R"/*/exit; do
  [ -e "$e" ] || continue
  rm -rf "${e%/exit}" && n=$((n + 1))
done
echo "$n"
'''


def new_run_id(now: float | None = None) -> str:
    """12 hex digits: the start second (so ids sort by start) and 16 random bits."""
    return f"{int(now if now is not None else time.time()):08x}{secrets.token_hex(2)}"


def check_run_id(value: str) -> str:
    if not ID_RE.fullmatch(value or ""):
        raise BadInput(f"'{value[:40]}' is not a run id", "`devenv runs HOST` lists the runs and their ids")
    return value


def check_run_name(value: str) -> str:
    if not NAME_RE.fullmatch(value or ""):
        raise BadInput(f"run name '{value[:40]}' is not allowed",
                       "use letters, digits, '.', '_' and '-' (63 at most), starting with a letter or digit")
    return value


def meta_line(run_id: str, name: str | None, argv: list[str], env: str, gpus: str | None,
              then: str | None) -> str:
    """meta.json's one line (json.dumps never writes a raw newline)."""
    return json.dumps({"id": run_id, "name": name, "argv": argv, "env": env, "gpus": gpus, "then": then},
                      separators=(",", ":"))


@dataclass
class Run:
    """One run as its folder says it."""

    id: str
    name: str | None = None
    argv: list[str] = field(default_factory=list)
    env: str = ""
    gpus: str | None = None
    then: str | None = None
    phase: str = "starting"          # starting | running | exited | killed | lost
    exit_code: int | None = None
    started: int | None = None       # epoch seconds, the host's clock
    ended: int | None = None

    @property
    def state(self) -> str:
        """For people: running, exited N, killed, lost, starting."""
        return f"exited {self.exit_code}" if self.phase == "exited" else self.phase

    @property
    def finished(self) -> bool:
        return self.phase in ("exited", "killed", "lost")

    def duration(self, now: float) -> float | None:
        if self.started is None:
            return None
        end = self.ended if self.ended is not None else (None if self.finished else now)
        return None if end is None else max(0.0, end - self.started)

    @property
    def command(self) -> str:
        import shlex

        return " ".join(shlex.quote(a) for a in self.argv)

    def to_json(self, now: float) -> dict[str, Any]:
        duration = self.duration(now)
        return {"id": self.id, "name": self.name, "argv": self.argv, "state": self.phase,
                "exit_code": self.exit_code, "started": self.started, "ended": self.ended,
                "duration_s": None if duration is None else round(duration, 1), "gpus": self.gpus,
                "env": self.env, "then": self.then}


def parse_listing(text: str) -> list[Run]:
    """LIST's output -> runs, oldest first. A line that cannot be read is left out (a run being written)."""
    runs: dict[str, Run] = {}
    extra: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        path, sep, value = line.partition(":")
        if not sep:
            continue
        run_id, _, what = path.partition("/")
        if not ID_RE.fullmatch(run_id):
            continue
        if what == "meta.json":
            try:
                meta = json.loads(value)
            except ValueError:
                continue
            if not isinstance(meta, dict):
                continue
            runs[run_id] = Run(id=run_id, name=meta.get("name"), argv=[str(a) for a in meta.get("argv") or []],
                               env=str(meta.get("env") or ""), gpus=meta.get("gpus"), then=meta.get("then"))
        else:
            extra.setdefault(run_id, {})[what] = value
    for run_id, run in runs.items():
        facts = extra.get(run_id, {})
        _apply(run, facts)
    return sorted(runs.values(), key=lambda r: r.id)


def _apply(run: Run, facts: dict[str, str]) -> None:
    started = int(run.id[:8], 16) if len(run.id) >= 8 else None
    run.started = started
    if "exit" in facts:
        code, _, when = facts["exit"].partition(" ")
        run.exit_code = int(code) if code.lstrip("-").isdigit() else None
        run.ended = int(when) if when.isdigit() else None
        run.phase = "killed" if "cancelled" in facts else "exited"
    else:
        run.phase = facts.get("state", "starting") if facts.get("state") in ("running", "lost", "starting") \
            else "starting"


def find_run(runs: list[Run], ref: str) -> Run | None:
    """A run by its id, a unique prefix of it, or its name (the newest of that name)."""
    exact = [r for r in runs if r.id == ref]
    if exact:
        return exact[0]
    named = [r for r in runs if r.name == ref]
    if named:
        return named[-1]
    prefixed = [r for r in runs if r.id.startswith(ref)]
    return prefixed[0] if len(prefixed) == 1 else None


def format_duration(seconds: float | None) -> str:
    """A run's duration in `runs`' TIME column: 5m10s, or '-' when unknown (a lost run)."""
    return "-" if seconds is None else compact_duration(seconds)
