"""The host names your ssh config names (`Host gpu1 gpu2`, through Include), for completion and "did you mean".

Only concrete names: a pattern (`*`, `?`, `!negated`) is no host one could type. Read as ssh reads the files
(Include with globs, relative to ~/.ssh; at most 16 levels), a regular file of bounded size each; a file that
cannot be read adds nothing (completing must never fail or hang).
"""

from __future__ import annotations

import glob
import os
import re
import shlex
from pathlib import Path

from devenv.config import paths

_MAX_DEPTH = 16
_LINE = re.compile(r"^\s*([A-Za-z]+)(?:\s*=\s*|\s+)(.*)$")  # `Keyword args` or `Keyword=args`


def ssh_aliases() -> list[str]:
    """Concrete Host names of the user's ssh config ($DEVENV_SSH_CONFIG, else ~/.ssh/config), in file order."""
    found: dict[str, None] = {}
    try:
        _read(paths.ssh_config_path(), found, 0)
    except Exception:  # noqa: BLE001  (a broken config must not break completion or an error's hint)
        pass
    return list(found)


def _read(path: Path, found: dict[str, None], depth: int) -> None:
    if depth > _MAX_DEPTH:
        return
    try:
        text = paths.read_regular_file(path, paths.MAX_USER_FILE).decode(errors="replace")
    except (OSError, paths.NotRegularFile, paths.FileTooLarge):
        return
    for line in text.splitlines():
        parsed = _LINE.match(line)
        if not parsed:
            continue
        try:
            args = shlex.split(parsed.group(2), comments=True)
        except ValueError:
            continue
        keyword = parsed.group(1).lower()
        if keyword == "host":
            for name in args:
                if not any(c in name for c in "*?!") and name:
                    found.setdefault(name, None)
        elif keyword == "include":
            for pattern in args:
                expanded = os.path.expanduser(pattern)
                if not os.path.isabs(expanded):
                    expanded = str(Path.home() / ".ssh" / expanded)
                for match in sorted(glob.glob(expanded)):
                    _read(Path(match), found, depth + 1)


def did_you_mean(name: str, extra: list[str] | None = None) -> str | None:
    """The closest host name the user could have meant (a profile or an ssh alias), or None."""
    import difflib

    from devenv.config import profiles

    candidates = [n for n in [*profiles.names("hosts"), *ssh_aliases(), *(extra or [])] if n != name]
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.75)
    return close[0] if close else None
