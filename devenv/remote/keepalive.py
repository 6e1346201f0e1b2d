"""ServerAliveInterval / ServerAliveCountMax as OpenSSH does them: ask the server for a reply every interval
and drop the connection after count_max unanswered asks.

paramiko's own set_keepalive() only sends requests that want no reply, which keeps NAT entries alive but
never notices a dead peer: after a laptop sleeps or a network drops, a stream() with no timeout (the GPU
monitor) would wait forever. Closing the transport makes every command on it fail as "connection lost".
"""

from __future__ import annotations

import threading
import time

from devenv.remote.sshlib import paramiko

_REASON = "_devenv_lost_reason"


def reason(transport: paramiko.Transport | None) -> str | None:
    """Why the keepalive closed this transport ("no answer to 3 keepalives in 90 s"), or None if it did not."""
    return getattr(transport, _REASON, None)


def watch(transport: paramiko.Transport, interval: float, count_max: int = 3) -> threading.Thread:
    thread = threading.Thread(target=_watch, args=(transport, interval, count_max),
                              name="devenv-keepalive", daemon=True)
    thread.start()
    return thread


def _watch(transport: paramiko.Transport, interval: float, count_max: int) -> None:
    while transport.is_active():
        time.sleep(interval)
        if not transport.is_active():
            return
        replied = threading.Event()

        def ask(replied: threading.Event = replied) -> None:
            # OpenSSH answers an unknown global request with a failure: any answer proves it alive.
            try:
                transport.global_request("keepalive@openssh.com", wait=True)
                replied.set()
            except Exception:  # the transport died under us: the outer loop sees it inactive
                pass

        threading.Thread(target=ask, name="devenv-keepalive-ask", daemon=True).start()
        if not replied.wait(interval * count_max) and transport.is_active():
            # said before closing, so whoever sees the channels close can already read why
            setattr(transport, _REASON, f"the host stopped answering: no reply to {count_max} SSH keepalives "
                                        f"in {interval * (count_max + 1):g} s")
            transport.close()
            return
