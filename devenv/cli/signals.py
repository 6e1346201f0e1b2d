"""SIGTERM and SIGHUP end a command the way Ctrl-C does: as a KeyboardInterrupt raised where the command waits,
so every `finally` and `except BaseException` on the way out runs (a queued Slurm job is cancelled, a remote
command is stopped, a tunnel is closed), and the CLI says it was interrupted and exits 128+N.

Without this, either signal (a closed terminal, `kill`, a CI runner's timeout) ended the process where it stood
and left what `up` had started half-made.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType

ENDING = (signal.SIGTERM, signal.SIGHUP)


class Stopped(KeyboardInterrupt):
    """A KeyboardInterrupt that came as SIGTERM or SIGHUP."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def ending_signals_interrupt() -> Iterator[None]:
    """While inside: SIGTERM and SIGHUP raise Stopped (in the main thread; elsewhere nothing changes). A handler
    someone else set is left alone; the ones before are back afterwards (a test runner calling the CLI keeps its
    own)."""
    previous = {}
    try:
        for sig in ENDING:
            handler = signal.getsignal(sig)
            if handler in (signal.SIG_DFL, None):
                previous[sig] = handler
                signal.signal(sig, _stop)
    except ValueError:  # not the main thread: signals are the main thread's
        pass
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler or signal.SIG_DFL)


def _stop(signum: int, frame: FrameType | None) -> None:
    # Once: the way out (cancelling a job, stopping a remote command) is not cut short by a second one.
    for sig in ENDING:
        signal.signal(sig, signal.SIG_IGN)
    raise Stopped(signum)


def exit_code(interrupt: KeyboardInterrupt) -> int:
    """128+N, as a shell reports a command ended by signal N (Ctrl-C: 130)."""
    return 128 + (interrupt.signum if isinstance(interrupt, Stopped) else signal.SIGINT)
