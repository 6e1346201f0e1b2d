"""Things that stand where a file is expected but are none (tests of readers that must not hang on them)."""

from __future__ import annotations

import os
from pathlib import Path

KINDS = ("fifo", "device", "folder")


def make(path: Path, kind: str) -> Path:
    """A FIFO (a read blocks forever), a link to /dev/zero (a read never ends) or a folder, at path."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()
    return path
