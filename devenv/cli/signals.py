"""SIGTERM and SIGHUP end a command the way Ctrl-C does: as a KeyboardInterrupt raised where the command waits,
so every `finally` and `except BaseException` on the way out runs (a queued Slurm job is cancelled, a remote
command is stopped, a tunnel is closed), and the CLI says it was interrupted and exits 128+N.

Without this, either signal (a closed terminal, `kill`, a CI runner's timeout) ended the process where it stood
and left what `up` had started half-made. All three, Ctrl-C included, are raised through remote/whole_packets.py:
never in the middle of an SSH packet, which would leave the connection that the way out needs dead.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType

from devenv.remote import whole_packets

ENDING = (signal.SIGTERM, signal.SIGHUP)


class Stopped(KeyboardInterrupt):
    """A KeyboardInterrupt that came as SIGTERM or SIGHUP."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def ending_signals_interrupt() -> Iterator[None]:
    """While inside: SIGTERM and SIGHUP raise Stopped, and Ctrl-C KeyboardInterrupt as Python's own handler does,
    but not in the middle of an SSH packet (in the main thread; elsewhere nothing changes). A handler someone else
    set is left alone; the ones before are back afterwards (a test runner calling the CLI keeps its own)."""
    previous: dict[signal.Signals, signal._HANDLER] = {}
    try:
        for sig in ENDING:
            handler = signal.getsignal(sig)
            if handler in (signal.SIG_DFL, None):
                previous[sig] = handler
                signal.signal(sig, _stop)
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            previous[signal.SIGINT] = signal.default_int_handler
            signal.signal(signal.SIGINT, _ctrl_c)
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
    whole_packets.interrupt(Stopped(signum))


def _ctrl_c(signum: int, frame: FrameType | None) -> None:
    whole_packets.interrupt(KeyboardInterrupt())


def exit_code(interrupt: KeyboardInterrupt) -> int:
    """128+N, as a shell reports a command ended by signal N (Ctrl-C: 130)."""
    return 128 + (interrupt.signum if isinstance(interrupt, Stopped) else signal.SIGINT)
