"""The laptop's cache of environments (L0): Jupyter token, ports, container id, the container's sshd host key.

One 0600 JSON file per (host, environment) under the state dir. A cache only: the hosts are the truth
(labels), and the token can be read back from the environment over the authenticated connection, so
deleting the state dir loses nothing that `devenv up`/`jupyter` cannot recover.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from devenv.config import paths

_SAFE = re.compile(r"[^A-Za-z0-9._-]")


def path_for(host: str, env: str) -> Path:
    return paths.state_dir() / "envs" / _SAFE.sub("_", host) / f"{_SAFE.sub('_', env)}.json"


def load(host: str, env: str) -> dict[str, Any]:
    path = path_for(host, env)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def save(host: str, env: str, data: dict[str, Any]) -> None:
    path = path_for(host, env)
    paths.ensure_private_dir(path.parent.parent)
    paths.write_private(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def update(host: str, env: str, **changes: Any) -> dict[str, Any]:
    data = load(host, env)
    data.update(changes)
    save(host, env, data)
    return data


def forget(host: str, env: str) -> None:
    try:
        path_for(host, env).unlink()
    except FileNotFoundError:
        pass


def host_path(host: str) -> Path:
    return paths.state_dir() / "hosts" / f"{_SAFE.sub('_', host)}.json"


def host_facts(host: str) -> dict[str, Any]:
    """What devenv learned about a host (e.g. ulimits its Docker refuses), to skip known failures."""
    try:
        data = json.loads(host_path(host).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def update_host_facts(host: str, **changes: Any) -> None:
    data = host_facts(host)
    data.update(changes)
    path = host_path(host)
    paths.ensure_private_dir(path.parent.parent)
    paths.write_private(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def placements_path() -> Path:
    return paths.state_dir() / "placements.json"


def placed_on(group: str, env: str) -> str | None:
    """The host `up @group` chose for env (a re-`up @group` returns there), if it chose one."""
    try:
        data = json.loads(placements_path().read_text())
    except (OSError, ValueError):
        return None
    host = data.get(f"{group}/{env}") if isinstance(data, dict) else None
    return host if isinstance(host, str) else None


def remember_placement(group: str, env: str, host: str) -> None:
    try:
        data = json.loads(placements_path().read_text())
    except (OSError, ValueError):
        data = {}
    data = data if isinstance(data, dict) else {}
    data[f"{group}/{env}"] = host
    paths.ensure_private_dir(placements_path().parent)
    paths.write_private(placements_path(), json.dumps(data, indent=2, sort_keys=True) + "\n")
