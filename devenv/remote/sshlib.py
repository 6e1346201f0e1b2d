"""paramiko, imported without invoke.

paramiko.config imports invoke (a task runner) at import time only to evaluate `Match exec` in paramiko's own
ssh_config parser, which devenv never uses (OpenSSH's `ssh -G`, or devenv.remote.sshconfig_parser, resolves
the config). invoke and what it pulls in (unittest.mock, asyncio) are about 40 % of importing paramiko, paid
by every command that connects. So paramiko is imported here with invoke marked absent, once per process;
a process that has already imported invoke keeps it. Every devenv module takes paramiko from here.

One method of paramiko's is replaced here, to be safe against Ctrl-C: Transport._send_user_message (below).
"""

from __future__ import annotations

import sys
import time
from typing import Any

_hidden = "invoke" not in sys.modules
if _hidden:
    sys.modules["invoke"] = None  # type: ignore[assignment]  # `import invoke` now raises ImportError
try:
    import paramiko
    import paramiko.agent
finally:
    if _hidden and sys.modules.get("invoke", 0) is None:
        del sys.modules["invoke"]  # later `import invoke` (someone else's) works as usual


def _send_user_message(self: Any, data: Any) -> None:   # paramiko's internals: typed by nothing
    """paramiko's Transport._send_user_message, with its lock taken by `with`.

    paramiko (5.x) calls clear_to_send_lock.acquire() and then Event.is_set() before its `try`: a signal's
    KeyboardInterrupt (Ctrl-C; SIGTERM and SIGHUP through cli/signals) raised right after the acquire (a call
    is where Python runs a pending handler) left the lock held. Every later message on the transport then
    waited for it forever: stopping the interrupted command, closing `up`'s lock holder, the keepalive. `up`
    interrupted while it waited for Jupyter hung instead of ending. Under `with`, no handler runs between the
    acquire and the block that releases it."""
    start = time.time()
    while True:
        self.clear_to_send.wait(0.1)
        if not self.active:
            return   # the connection is dead: the message goes nowhere (as paramiko's own)
        with self.clear_to_send_lock:
            if self.clear_to_send._flag:   # no call here: nowhere for an interrupt to land with the lock held
                self._send_message(data)
                return
        if time.time() > start + self.clear_to_send_timeout:
            raise paramiko.SSHException("Key-exchange timed out waiting for key negotiation")


paramiko.Transport._send_user_message = _send_user_message  # type: ignore[attr-defined]

__all__ = ["paramiko"]
