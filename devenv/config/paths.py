"""Where devenv keeps user profiles, state and which SSH files it reads.

DEVENV_HOME overrides everything (tests point it at a temporary folder). Otherwise config follows XDG:
profiles in $XDG_CONFIG_HOME/devenv, state (a cache; the hosts are the truth) in $XDG_STATE_HOME/devenv.
DEVENV_SSH_CONFIG and DEVENV_KNOWN_HOSTS point the SSH layer at other files than ~/.ssh/config and
~/.ssh/known_hosts, so tests never read the user's own.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from devenv.errors import BadInput

MAX_USER_FILE = 4 * 1024 * 1024  # an ssh config or a key: small; more is a mistake (a link to /dev/zero?)


def expand_home(value: str | Path, what: str) -> Path:
    """value with a leading ~ or ~user expanded; a ~user for no such user is bad input naming `what` (pathlib
    raises RuntimeError there, which would be a crash: `DEVENV_SSH_KEY=~-oX` found by the CLI fuzz test)."""
    try:
        return Path(value).expanduser()
    except RuntimeError:
        from devenv.config import validate

        raise BadInput(f"{what} {validate.preview(str(value))}: no such user's home for its ~",
                       f"write {what} as a full path, or as ~/... for your own home") from None


def _xdg(var: str, default: str) -> Path:
    return Path(os.environ.get(var) or Path.home() / default)


def devenv_home() -> Path | None:
    value = os.environ.get("DEVENV_HOME")
    return expand_home(value, "DEVENV_HOME") if value else None


def check_devenv_home() -> None:
    """DEVENV_HOME, when set, is a folder or nothing yet (made on first use): a file or another non-folder there
    is bad input, said before any command dials a host (it would fail later, when state is written)."""
    home = devenv_home()
    if home is None:
        return
    try:
        info = os.stat(home)
    except FileNotFoundError:
        return
    except OSError as e:  # a path through a file (ENOTDIR), a loop of links, no permission
        raise BadInput(f"DEVENV_HOME {home}: {e.strerror}", "point DEVENV_HOME at a folder (or unset it)") from None
    if not stat.S_ISDIR(info.st_mode):
        raise BadInput(f"DEVENV_HOME {home} is not a folder", "point DEVENV_HOME at a folder (or unset it)")


def config_dir() -> Path:
    home = devenv_home()
    return home if home else _xdg("XDG_CONFIG_HOME", ".config") / "devenv"


def state_dir() -> Path:
    home = devenv_home()
    return home / "state" if home else _xdg("XDG_STATE_HOME", ".local/state") / "devenv"


def user_profiles_dir() -> Path:
    return config_dir() / "profiles"


def ssh_config_path() -> Path:
    return expand_home(os.environ.get("DEVENV_SSH_CONFIG") or Path.home() / ".ssh" / "config", "DEVENV_SSH_CONFIG")


def known_hosts_path() -> Path:
    return expand_home(os.environ.get("DEVENV_KNOWN_HOSTS") or Path.home() / ".ssh" / "known_hosts",
                       "DEVENV_KNOWN_HOSTS")


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


class NotRegularFile(Exception):
    """A FIFO, a device or a folder where a file was expected (a read would hang, never end, or fail)."""


class FileTooLarge(Exception):
    """More bytes than the reader's limit."""


def read_regular_file(path: Path, limit: int) -> bytes:
    """The bytes of a regular file of at most `limit` bytes, opened without blocking on a FIFO and checked on the
    open descriptor (no race with a swapped link). Raises NotRegularFile, FileTooLarge, or the OSError of the
    open or read (FileNotFoundError included): each caller words them for its kind of file."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFile(str(path))
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > limit:
        raise FileTooLarge(str(path))
    return b"".join(chunks)


def read_user_file(path: Path, what: str, limit: int = MAX_USER_FILE) -> bytes | None:
    """The bytes of a file the user keeps (their ssh config): None when it does not exist; BadInput (exit 2)
    when it is a FIFO, a device or a folder (a read would hang, never end, or fail) or larger than limit."""
    try:
        return read_regular_file(path, limit)
    except FileNotFoundError:
        return None
    except NotRegularFile:
        raise BadInput(f"{what} {path} is not a regular file (a FIFO, a device or a folder)",
                       "point it at the file itself") from None
    except FileTooLarge:
        raise BadInput(f"{what} {path} is larger than {limit // 1024} KiB", "point it at the file itself") from None
    except OSError as exc:
        raise BadInput(f"cannot read {what} {path}: {exc.strerror}", "check the file and its permissions") from None
