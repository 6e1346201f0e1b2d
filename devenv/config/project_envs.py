"""Environments a project's devcontainer makes without any YAML: one per project, named after it.

`devenv up HOST` in a folder with a devcontainer.json makes the environment `<project>` (the devcontainer's
name, else the folder's), on top of the host's default environment, so two projects on one host never take
each other's environment. The name is remembered here (a 0600 file in the state dir: the name, the environment
it builds on and the devcontainer.json), so `--env <project>` works in every command, from any folder, as for an
environment profile. A profile of the same name always wins; the project's name then gets a suffix.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devenv.config import paths


@dataclass(frozen=True)
class ProjectEnv:
    name: str          # the environment's name (a valid profile name)
    base: str          # the environment profile it builds on (cpu, cuda, ...)
    source: str        # the devcontainer.json it was made from (absolute)
    root: str          # the project folder


def _file() -> Path:
    return paths.state_dir() / "projects.json"


def _all() -> dict[str, Any]:
    try:
        data = json.loads(_file().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def lookup(name: str) -> ProjectEnv | None:
    """The project environment remembered by that name, or None."""
    entry = _all().get(name)
    if not isinstance(entry, dict):
        return None
    try:
        return ProjectEnv(name, str(entry["base"]), str(entry["source"]), str(entry["root"]))
    except KeyError:
        return None


def names() -> list[str]:
    """Every project environment remembered here."""
    return sorted(_all())


def name_for(root: Path, label: str | None, taken: set[str]) -> str:
    """The environment name of the project at root: its label (devcontainer's `name`) or folder name as a valid
    profile name; with a suffix from the folder's path when a profile (in `taken`) or another project has it."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", (label or root.name).strip().lower()).strip("-._")[:48] or "project"
    known = _all()
    mine = known.get(slug, {}).get("root") in (None, str(root)) if isinstance(known.get(slug), dict) else True
    if slug not in taken and mine:
        return slug
    return f"{slug}-{hashlib.sha256(str(root).encode()).hexdigest()[:6]}"


def remember(env: ProjectEnv) -> None:
    known = _all()
    if known.get(env.name) == {"base": env.base, "source": env.source, "root": env.root}:
        return
    known[env.name] = {"base": env.base, "source": env.source, "root": env.root}
    paths.write_private(_file(), json.dumps(known, indent=1, sort_keys=True) + "\n")
