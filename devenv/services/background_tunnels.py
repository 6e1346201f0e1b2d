"""Tunnels held by a process of their own (L2): `devenv tunnel ... --background`, `devenv jupyter ... --background`.

Each such process (`devenv tunnel|jupyter ... --held-as ID`, in a session of its own, its output in ID.log) holds
its tunnel with services.held_tunnel's reconnect loop and keeps a record in the state dir, tunnels/ID.json
(0600): host, environment, ports, URL, state, since when, reconnects. The ID says what is forwarded (host,
environment, what), so a second start of the same forward finds the first and reuses it. A record whose process
is gone (killed, the laptop rebooted) is stale and removed when read; stopping sends SIGTERM (the holder closes
its tunnel as Ctrl-C does) and removes the record.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from devenv.config import paths
from devenv.errors import BadInput

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,119}")
STOP_TIMEOUT = 10.0


@dataclass
class TunnelRecord:
    id: str
    pid: int
    host: str
    env: str
    what: str                          # "jupyter" or "ports"
    forwards: list[dict[str, int]]     # [{"local_port": 8888, "env_port": 8888}]
    url: str | None = None
    state: str = "starting"            # starting | open | reconnecting
    since: float = field(default_factory=time.time)   # when it entered this state (epoch s)
    reconnects: int = 0
    started: float = field(default_factory=time.time)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def tunnel_id(host: str, env: str | None, what: str) -> str:
    """The ID of a forward: the same host, environment and ports give the same one (reuse)."""
    return _UNSAFE.sub("-", f"{host}.{env or 'default'}.{what}").strip("-.")[:120]


def checked(tid: str) -> str:
    """tid, if it can be an ID (it names a file in the state dir: never a path); BadInput if not."""
    if not _ID.fullmatch(tid):
        raise BadInput(f"'{tid}' is not a tunnel ID", "`devenv tunnels` lists them")
    return tid


def folder() -> Path:
    return paths.state_dir() / "tunnels"


def log_path(tid: str) -> Path:
    return folder() / f"{checked(tid)}.log"


def write(record: TunnelRecord) -> None:
    paths.ensure_private_dir(folder())
    paths.write_private(folder() / f"{checked(record.id)}.json", json.dumps(record.to_json(), sort_keys=True) + "\n")


def remove(tid: str) -> None:
    for path in (folder() / f"{checked(tid)}.json", log_path(tid)):
        try:
            path.unlink()
        except FileNotFoundError:
            pass


def holder_alive(pid: int, tid: str) -> bool:
    """Whether pid is still the devenv process holding tid (not a dead one whose number was reused)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        return True   # no /proc (macOS): the pid alone
    return b"--held-as" in argv and tid.encode() in argv


def find(tid: str) -> TunnelRecord | None:
    """The live record of tid; a stale one (its process gone) is removed."""
    path = folder() / f"{checked(tid)}.json"
    try:
        data = json.loads(path.read_text())
        record = TunnelRecord(**data)
    except (OSError, ValueError, TypeError):
        return None
    if not holder_alive(record.pid, record.id):
        remove(tid)
        return None
    return record


def all_records() -> list[TunnelRecord]:
    if not folder().is_dir():
        return []
    found = [find(path.stem) for path in sorted(folder().glob("*.json")) if _ID.fullmatch(path.stem)]
    return [record for record in found if record is not None]


def stop(record: TunnelRecord, timeout: float = STOP_TIMEOUT) -> bool:
    """SIGTERM to its holder and a bounded wait until it is gone (then SIGKILL); the record removed. Whether it
    ended within timeout."""
    try:
        os.kill(record.pid, signal.SIGTERM)
    except ProcessLookupError:
        remove(record.id)
        return True
    deadline = time.monotonic() + timeout
    while holder_alive(record.pid, record.id):
        if time.monotonic() > deadline:
            try:
                os.kill(record.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            remove(record.id)
            return False
        time.sleep(0.05)
    remove(record.id)
    return True


def stop_env(host: str, env: str) -> list[TunnelRecord]:
    """Stop every background tunnel of one environment (its `down`); the ones stopped."""
    stopped = [record for record in all_records() if record.host == host and record.env == env]
    for record in stopped:
        stop(record)
    return stopped
