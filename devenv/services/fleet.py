"""GPUs across hosts (L2): one look at every host at once, within one bound; a host that has not answered by
then is shown as down, not waited for (its look goes on in a daemon thread and is dropped).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

from devenv.checks import health
from devenv.config.profiles import HostProfile
from devenv.errors import DevenvError
from devenv.gpu import fleet
from devenv.gpu.fleet import HostGpus
from devenv.gpu.occupancy import parse_occupancy
from devenv.remote.base import Connection

ANSWER_BOUND_S = 20.0
T = TypeVar("T")


def look_host(name: str, conn: Connection, timeout: float = ANSWER_BOUND_S) -> HostGpus:
    """One host's GPUs (never raises for the host's own failures: its HostGpus says down or error)."""
    from devenv.services.monitor import container_names

    try:
        result = conn.run(fleet.look_script(), timeout=timeout)
        occ = parse_occupancy(result.stdout, time.time())
        names = container_names(conn) if any(p.container for p in occ.processes) else {}
        look = fleet.parse_look(name, result.stdout + result.stderr, result.exit_code, occupancy=occ,
                                container_names=names)
        query = fleet.health_section(result.stdout)
        sick = health.sick_gpus(health.judge_health(query, 0, None)) if query.strip() else {}
        return fleet.with_health(look, sick, judged=bool(query.strip()))
    except DevenvError as e:
        return fleet.down(name, e.message, e.hint)


def bounded(names: list[str], work: Callable[[str], T], late: Callable[[str], T],
            bound_s: float = ANSWER_BOUND_S) -> list[T]:
    """work(name) for every name at once, in daemon threads; a name whose work has not ended within bound_s
    gets late(name), and its thread is left to end on its own (a dead host is not waited for)."""
    answers: dict[str, T] = {}
    done = threading.Condition()

    def one(name: str) -> None:
        answer = work(name)
        with done:
            answers[name] = answer
            done.notify_all()

    for name in names:
        threading.Thread(target=one, args=(name,), name=f"devenv-fleet-{name}", daemon=True).start()
    deadline = time.monotonic() + bound_s
    with done:
        while len(answers) < len(names):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            done.wait(left)
        got = dict(answers)
    return [got[name] if name in got else late(name) for name in names]


def too_late(bound_s: float) -> Callable[[str], HostGpus]:
    return lambda name: fleet.down(name, f"no answer within {bound_s:g} s",
                                   f"check that it is up and reachable (devenv check {name})")


def look(hosts: list[HostProfile], connect: Callable[[HostProfile], Connection],
         bound_s: float = ANSWER_BOUND_S) -> list[HostGpus]:
    """Every host's GPUs, in the order given, all within bound_s: a host not answered by then is down."""
    by_name = {h.name: h for h in hosts}

    def one(name: str) -> HostGpus:
        try:
            return look_host(name, connect(by_name[name]), timeout=bound_s)
        except DevenvError as e:
            return fleet.down(name, e.message, e.hint)

    return bounded([h.name for h in hosts], one, too_late(bound_s), bound_s)
