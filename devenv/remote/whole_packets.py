"""Each SSH packet the main thread sends goes out whole, even when an interrupt comes in the middle of it.

Ctrl-C, SIGTERM and SIGHUP end a command as a KeyboardInterrupt raised wherever the main thread stands
(cli/signals.py), so that every `finally` on the way out can still tidy the host: remove a build container, cancel
a queued job, stop a remote command. Raised inside paramiko's Packetizer.send_message after the packet's cipher
step but before the packet was written (or half of it), it left this side's cipher a packet ahead of the server's:
the server failed the next packet's MAC and dropped the connection, and the tidying met a dead transport (a SIGTERM
while `image build` sent its files left the build container running and ended in exit 70, "'NoneType' object has
no attribute 'settimeout'"). So an interrupt that comes while the main thread sends a packet is held until that
packet is written, then raised there; a second one is raised at once.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

_sending = 0                          # the main thread is inside this many packet sends (nested: 0 or 1)
_held: BaseException | None = None    # the interrupt that came meanwhile


def interrupt(exc: BaseException) -> None:
    """Raise exc (from a signal handler): now, or, while the main thread is in the middle of a packet, as soon as
    that packet is written. A second interrupt while one is held is raised at once (the user insists)."""
    global _held
    if _sending and _held is None:
        _held = exc
        return
    raise exc


def install() -> None:
    """Make paramiko's packet sends whole (idempotent). Called before a transport is made (remote/dial.py)."""
    from paramiko.packet import Packetizer

    if getattr(Packetizer.send_message, "_devenv_whole", False):
        return
    setattr(Packetizer, "send_message", _whole(Packetizer.send_message))  # noqa: B010  # a method replaced: mypy refuses the assignment


def _whole(send: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
    @functools.wraps(send)
    def send_message(self: Any, data: Any) -> None:
        global _sending, _held
        if threading.current_thread() is not threading.main_thread():   # signals are the main thread's
            send(self, data)
            return
        _sending += 1
        try:
            send(self, data)
        finally:
            _sending -= 1
            if not _sending and _held is not None:
                held, _held = _held, None
                raise held

    send_message._devenv_whole = True  # type: ignore[attr-defined]
    return send_message
