"""`devenv -v` / DEVENV_DEBUG=1: the "devenv" logger to stderr, so a slow command can be explained afterwards
(each remote command with its exit code and duration, each connection and reconnect: remote/ssh.py)."""

from __future__ import annotations

import logging
import sys


def setup_logging() -> None:
    logger = logging.getLogger("devenv")
    if any(getattr(h, "devenv_debug", False) for h in logger.handlers):
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.devenv_debug = True  # type: ignore[attr-defined]  # marks ours: set up once per process
    handler.setFormatter(logging.Formatter("devenv %(relativeCreated)7.0f ms %(name)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
