"""One `up` of an environment at a time, held on its host (L2), whatever the backend.

Two `up` of one environment at the same moment (two terminals, a script and a person) each saw "nothing
there" and each made one: two Docker networks and a container left `created`, or two Slurm jobs. The lock is
`flock` on a file under the host's ~/.devenv/locks, held by one command that stays open on the host for as
long as `up` runs: the kernel drops the lock when that command ends, and it ends when `up` releases it (in the
background: the URL does not wait for the holder's end), or when
`up`'s connection goes (a killed laptop: the command's next keep-alive write fails within seconds). A dead
holder never blocks the next `up`.

The second `up` waits for the first and then finds the environment made: it reattaches. A host without
`flock` gets no lock (as before).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator

from devenv.errors import DevenvError
from devenv.remote.base import Connection

log = logging.getLogger(__name__)

WAIT_S = 1800          # an `up` that builds an image may hold it for minutes; past this, the second one gives up
KEEPALIVE_S = 2        # how soon the holder notices that `up` (or its connection) is gone


def _script(key: str, wait_s: int) -> str:
    # fd 9 is the lock; `sleep` gets it closed, so that only the shell holds it and it goes with the shell
    return (f'd="$HOME/.devenv/locks"; mkdir -p "$d" 2>/dev/null && exec 9>>"$d/{key}.lock" '
            f"|| {{ echo unlocked; exit 0; }}\n"
            f"command -v flock >/dev/null 2>&1 || {{ echo unlocked; exit 0; }}\n"
            f"if ! flock -n 9; then echo busy; flock -w {wait_s} 9 || {{ echo timeout; exit 0; }}; fi\n"
            f"echo locked\n"
            f"while :; do sleep {KEEPALIVE_S} 9>&-; echo held || exit 0; done")


@contextlib.contextmanager
def up_lock(conn: Connection, owner: str, env_name: str, on_wait: Callable[[str], None],
            wait_s: int = WAIT_S) -> Iterator[None]:
    """Hold the lock of owner's env_name on conn's host while inside; on_wait is told when another holds it."""
    key = re.sub(r"[^A-Za-z0-9._-]", "_", f"{owner}-{env_name}")
    lines = conn.stream(_script(key, wait_s))
    try:
        said = next(lines, "unlocked")
        if said == "busy":
            on_wait(f"Another `up` of '{env_name}' on {conn.name} is under way; waiting for it to end "
                    f"(at most {_span(wait_s)})")
            said = next(lines, "unlocked")
        if said == "timeout":
            raise DevenvError(f"another `up` of '{env_name}' on {conn.name} has held it for {_span(wait_s)}",
                              f"see what it does with `devenv status {conn.name}`, or stop that `up` and run "
                              "this one again")
        yield
    finally:
        close = getattr(lines, "close", None)
        if close is not None:
            release(close, conn.name)


RELEASE_AT_EXIT_S = 10.0   # how long a process that exits waits for a release still under way
_releases: list[threading.Thread] = []


def release(close: Callable[[], object], host: str) -> threading.Thread:
    """End the holder on the host (the lock goes with it) without making `up` wait: over SSH that is one more
    command on the host (a login shell that kills the holder: 0.1-1.5 s, by the host's load), which used to
    stand between Jupyter answering and the URL. A command that ends right after `up` (--detach, --json, an
    error, a Ctrl-C) still ends the holder on its way out (_finish_releases), but waits for it at most
    RELEASE_AT_EXIT_S: a thread that is not a daemon was waited for without a bound, and a release stuck on a
    connection the exit would have closed kept the process from ending (an `up` ended by Ctrl-C did not exit)."""

    def run() -> None:
        try:
            close()
        except Exception as e:  # a lost connection took the holder (and the lock) already;
            # what ended `up` (that lost connection, say) is the error to show, not this one
            log.debug("closing the up lock's holder on %s: %r", host, e)

    thread = threading.Thread(target=run, name="devenv-up-lock-release", daemon=True)
    thread.start()
    _releases[:] = [t for t in _releases if t.is_alive()] + [thread]
    return thread


@atexit.register
def _finish_releases() -> None:
    """Before the process ends (atexit runs this before the connections it registered earlier are closed), the
    releases under way finish, within RELEASE_AT_EXIT_S in all."""
    deadline = time.monotonic() + RELEASE_AT_EXIT_S
    for thread in list(_releases):
        thread.join(max(0.0, deadline - time.monotonic()))


def _span(seconds: int) -> str:
    return f"{seconds // 60} min" if seconds >= 120 else f"{seconds} s"
