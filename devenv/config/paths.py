"""Where devenv keeps user profiles, state and which SSH files it reads.

DEVENV_HOME overrides everything (tests point it at a temporary folder). Otherwise config follows XDG:
profiles in $XDG_CONFIG_HOME/devenv, state (a cache; the hosts are the truth) in $XDG_STATE_HOME/devenv.
DEVENV_SSH_CONFIG and DEVENV_KNOWN_HOSTS point the SSH layer at other files than ~/.ssh/config and
~/.ssh/known_hosts, so tests never read the user's own.
"""

from __future__ import annotations

import os
from pathlib import Path


def _xdg(var: str, default: str) -> Path:
    return Path(os.environ.get(var) or Path.home() / default)


def devenv_home() -> Path | None:
    value = os.environ.get("DEVENV_HOME")
    return Path(value).expanduser() if value else None


def config_dir() -> Path:
    home = devenv_home()
    return home if home else _xdg("XDG_CONFIG_HOME", ".config") / "devenv"


def state_dir() -> Path:
    home = devenv_home()
    return home / "state" if home else _xdg("XDG_STATE_HOME", ".local/state") / "devenv"


def user_profiles_dir() -> Path:
    return config_dir() / "profiles"


def ssh_config_path() -> Path:
    return Path(os.environ.get("DEVENV_SSH_CONFIG") or Path.home() / ".ssh" / "config").expanduser()


def known_hosts_path() -> Path:
    return Path(os.environ.get("DEVENV_KNOWN_HOSTS") or Path.home() / ".ssh" / "known_hosts").expanduser()


def bundled_dir(name: str) -> Path:
    """Bundled `profiles` or `images`: inside an installed wheel, else at the checkout's root."""
    packaged = Path(__file__).resolve().parent.parent / "_bundled" / name
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent.parent / name


def ensure_private_dir(path: Path) -> Path:
    """Create a directory readable only by the user (state holds tokens)."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path, 0o700)
    return path


def write_private(path: Path, text: str) -> None:
    """Write a 0600 file atomically: never a moment where a secret is world-readable or half-written."""
    ensure_private_dir(path.parent)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)
