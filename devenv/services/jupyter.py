"""Jupyter for an environment (L2): its token, its URL, and a bounded wait until it (and sshd) answer.

The token is random, lives in a root-only file inside the environment and in the laptop's 0600 state,
and never appears on a command line, in an environment variable or in `docker inspect`.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from devenv.errors import DevenvError

TOKEN_FILE = "/etc/devenv/jupyter_token"
READY_TIMEOUT = 180.0   # a first start on a slow host (Jupyter imports, sshd keygen) is well under this


def new_token() -> str:
    return secrets.token_hex(24)  # 48 hex characters, 192 bits


def lab_url(port: int, token: str) -> str:
    return f"http://127.0.0.1:{port}/lab?token={token}"


@dataclass(frozen=True)
class Probe:
    ok: bool
    text: str              # the probe's report, e.g. "jupyter ok: ...\nsshd down: ..."
    stopped: str | None = None   # set when the environment is no longer running: no point waiting
    down: tuple[str, ...] = ()   # the services that did not answer, where the probe names them


class NotReady(DevenvError):
    """The environment did not answer within the bounded wait; carries its last logs."""

    def __init__(self, host: str, waited: float, last: Probe, logs: list[str]):
        why = last.stopped or "; ".join(line for line in last.text.splitlines() if "down" in line) or last.text
        message = f"the environment on {host} did not answer within {waited:.0f} s: {why.strip()}"
        if logs:
            message += "\nlast lines of its log:\n" + "\n".join(f"  | {line}" for line in logs)
        super().__init__(message, "fix what the log shows (`devenv logs HOST` for more), then `devenv up HOST` "
                                  "again; raise --ready-timeout if the host is just slow")
        self.last = last


def wait_ready(probe: Callable[[], Probe], logs: Callable[[], list[str]], *, host: str,
               timeout: float = READY_TIMEOUT, interval: float = 0.25, steady_for: float = 0.0,
               on_wait: Callable[[float, Probe], None] | None = None) -> float:
    """Poll probe until it is ok; seconds waited. NotReady (with the logs) past timeout or if it stopped.
    Polls every interval for the first steady_for seconds, then ever less often (at most every 2 s)."""
    started = time.monotonic()
    while True:
        result = probe()
        waited = time.monotonic() - started
        if result.ok:
            return waited
        if result.stopped or waited >= timeout:
            raise NotReady(host, waited, result, logs())
        if on_wait is not None:
            on_wait(waited, result)
        # Quick polls while a fresh Jupyter starts (seconds), slower ones for a slow host, never past timeout.
        slower = max(0.0, waited - steady_for) / 5
        time.sleep(min(interval * (1 + slower), 2.0, max(0.05, timeout - waited)))
