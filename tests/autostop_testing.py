"""What the autostop integration tests share (tests/integration/environments/test_env_autostop.py,
tests/integration/slurm/test_slurm_autostop.py): reading a watcher's state file on the test host, waiting on an
event (bounded, polled; nothing asserts a time), "held through N windows", "stopped by autostop", and a Jupyter
cell that keeps a kernel busy until a file appears.

A watcher writes ~/.devenv/autostop/OWNER-ENV/state.json under the HOME of the login that armed it: this
machine's HOME for the test host's sshd (testbox), or the replay sshd's own HOME (env_testing.replay_gpu_host).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

WINDOW = "4s"        # sampled every second (a tenth of the window, at least 1 s)
REASON = "idle 4 s"  # what the watcher says once it stopped the environment after WINDOW
BOUND_S = 240        # the most any one wait may take on a loaded machine


def state_file(key: str, home: Path | str | None = None) -> Path:
    return Path(home or os.path.expanduser("~")) / ".devenv" / "autostop" / key / "state.json"


def watcher_state(key: str, home: Path | str | None = None) -> dict[str, Any]:
    """The watcher's last state ({} until it wrote one, or while it is rewritten)."""
    try:
        state = json.loads(state_file(key, home).read_text())
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def wait_for(what: str, ready: Callable[[], Any], bound: float = BOUND_S) -> Any:
    """ready() until it gives something true, at most `bound` seconds (an event, polled; no timing asserted)."""
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        got = ready()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def held_through_windows(key: str, holder: str, home: Path | str | None = None, windows: int = 3) -> dict:
    """The watcher took enough samples, each held by `holder`, to have stopped the environment `windows` times
    over had it been idle; returns its state then (still watching, still held by `holder`)."""
    def watching() -> dict:
        state = watcher_state(key, home)
        if state.get("state", "watching") != "watching":    # it acted (or is acting): the hold did not hold
            raise AssertionError(f"{key} {state['state']} while it should be held by {holder}: {state}")
        return state

    first = wait_for(f"a sample of {key} held by {holder}", lambda: (s := watching()).get("samples")
                     and holder in s.get("held_by", []) and s)
    needed = first["samples"] + windows * int(first["window_s"] / first["interval_s"] + 1)
    state = wait_for(f"{needed} samples of {key}", lambda: (s := watching()).get("samples", 0) >= needed and s)
    assert state["state"] == "watching" and holder in state["held_by"], state
    return state


def stopped_by_autostop(key: str, home: Path | str | None = None) -> dict:
    """The watcher's last word: it stopped the environment, idle for the whole window."""
    state = wait_for(f"{key} stopped by autostop", lambda: (s := watcher_state(key, home)).get("state") == "stopped"
                     and s)
    assert state["reason"] == REASON, state
    return state


def armed_note(notes: list[str]) -> bool:
    """`up --autostop WINDOW --json` says it armed the watcher."""
    return any(n.startswith("autostop: stop after 4 s idle") for n in notes)


@contextmanager
def busy_cell(url: str, go: str, finish: Callable[[], object]) -> Iterator[Any]:
    """A kernel of the Jupyter at `url` (with its token) runs a cell (a loop of time.sleep until the file `go`
    exists, as the kernel sees it), executed through Jupyter's real API; yields the client once the kernel says
    it is busy. On leaving, finish() makes `go`, and the cell must have ended with its result."""
    from jupyter_client import JupyterClient

    done: list = []
    with JupyterClient(url, timeout=60) as jc:
        kernel = jc.start_kernel()
        cell = threading.Thread(target=lambda: done.append(jc.execute(
            kernel, f"import os, time\nwhile not os.path.exists({go!r}):\n    time.sleep(0.2)\n'done'",
            timeout=BOUND_S * 3)))
        cell.start()
        try:
            wait_for("the kernel busy", lambda: any(k["execution_state"] == "busy"
                                                    for k in jc.api("/api/kernels").json()))
            yield jc
        finally:
            finish()
            cell.join(BOUND_S)
        assert done and done[0].status == "ok" and done[0].result == "'done'", done
