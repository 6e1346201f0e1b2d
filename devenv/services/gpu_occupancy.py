"""Who else is on a host's GPUs (L2): one look, a watch in a thread for the length of a run, a wait until
the GPUs are free, and the pick of GPUs for `up` and `sanity --gpus` (the pure parts: devenv.gpu.occupancy
and devenv.gpu.choose). Always through the HOST's connection: inside a container, nvidia-smi cannot see other
containers' processes, and the host's ps/proc name their users and containers.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace

from devenv.errors import DevenvError
from devenv.gpu import choose as gpu_choose
from devenv.gpu.occupancy import Occupancy, RunIdentity, Sharer, occupancy_script, parse_occupancy
from devenv.remote.base import Connection

EXIT_BUSY = 5
WAIT_STEP_S = 2.0


class GpusBusy(DevenvError):
    """The GPUs stayed busy for as long as we were told to wait."""

    exit_code = EXIT_BUSY


def sample(conn: Connection, *, nvidia_smi: str = "nvidia-smi", timeout: float = 30,
           clock: Callable[[], float] = time.time, pmon: bool = False, extra: str = "") -> Occupancy:
    """One look (never raises for a host without GPUs: its Occupancy has no GPUs and an error). pmon: with each
    process's SM % (to tell an idle co-tenant from a working one); extra: shell lines run after the frame, their
    output in the Occupancy's tail."""
    try:
        result = conn.run(occupancy_script(nvidia_smi, pmon=pmon) + ("\n" + extra if extra else ""), timeout=timeout)
    except DevenvError as e:
        return Occupancy(clock(), error=e.message)
    occ = parse_occupancy(result.stdout, clock())
    if not occ.gpus and occ.error is None:
        occ = replace(occ, error=(result.stdout + result.stderr).strip()[-300:] or "nvidia-smi lists no GPU")
    return occ


def name_containers(conn: Connection, sharers: list[Sharer]) -> list[Sharer]:
    """Container ids replaced by names (one `docker ps`), for the words people read."""
    if not any(s.container for s in sharers):
        return sharers
    from devenv.services.monitor import container_names

    names = container_names(conn)
    return [replace(s, container=names.get(s.container, s.container)) if s.container else s for s in sharers]


class Watch:
    """Samples a host every `every_s` seconds in a daemon thread until stop(); keeps every sample."""

    def __init__(self, conn: Connection, every_s: float = 2.0, nvidia_smi: str = "nvidia-smi", pmon: bool = True,
                 extra: str = ""):
        self.conn, self.every_s, self.nvidia_smi, self.pmon, self.extra = conn, every_s, nvidia_smi, pmon, extra
        self.samples: list[Occupancy] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gpu-occupancy", daemon=True)

    def start(self) -> Watch:
        self._thread.start()
        return self

    def stop(self) -> list[Occupancy]:
        self._stop.set()
        self._thread.join(timeout=35)
        return list(self.samples)

    def _loop(self) -> None:
        while not self._stop.is_set():
            occ = sample(self.conn, nvidia_smi=self.nvidia_smi, pmon=self.pmon, extra=self.extra)
            if occ.gpus:
                self.samples.append(occ)
            self._stop.wait(self.every_s)


def pick(states: list[gpu_choose.GpuState], gpus: str, *, host: str, allow_busy: bool,
         among: list[int] | None = None) -> gpu_choose.Choice:
    """The GPUs `gpus` names on this sample: N free ones (free:N), the named ones, or all (of `among`).
    With allow_busy False, named or all GPUs that are busy raise NotEnoughFreeGpus too (for waiting)."""
    count = gpu_choose.count_of(gpus)
    if count is not None:
        return gpu_choose.choose(states, count, host=host, allow_busy=allow_busy, among=among)
    by_index = {s.index: s for s in states}
    wanted = gpu_choose.indices_of(gpus)
    if wanted is None:
        wanted = [s.index for s in states if among is None or s.index in among]
    missing = [i for i in wanted if i not in by_index or (among is not None and i not in among)]
    if missing:
        have = among if among is not None else sorted(by_index)
        raise DevenvError(f"GPU {', '.join(map(str, missing))} is not on {host}"
                          + (" in this environment" if among is not None else "")
                          + f" (it has GPU {', '.join(map(str, have)) or 'none'})",
                          "name GPUs by the index `devenv check HOST` lists")
    picked = [by_index[i] for i in wanted]
    busy = [s for s in picked if not s.free]
    if busy and not allow_busy:
        raise gpu_choose.NotEnoughFreeGpus("; ".join(s.describe() for s in busy), "")
    return gpu_choose.Choice(tuple(wanted), tuple(s.uuid for s in picked), tuple(busy))


def wait_free(conn: Connection, gpus: str, *, host: str, timeout_s: float, among: list[int] | None = None,
              on_wait: Callable[[str], None] | None = None, me: RunIdentity | None = None,
              clock: Callable[[], float] = time.monotonic,
              sleep: Callable[[float], None] = time.sleep) -> tuple[gpu_choose.Choice, Occupancy]:
    """Wait until the GPUs `gpus` names are free (at most timeout_s), saying why every few seconds.
    Raises GpusBusy (exit 5) naming who still holds them."""
    start = clock()
    said = None
    while True:
        looked = clock() - start  # when this look began (the first says 0 s)
        occ = sample(conn)
        if not occ.gpus:
            raise DevenvError(f"cannot see {host}'s GPUs: {occ.error}", "check the driver with `devenv check`")
        states = gpu_choose.gpu_states(occ, me)
        try:
            return pick(states, gpus, host=host, allow_busy=False, among=among), occ
        except gpu_choose.NotEnoughFreeGpus as busy:
            # said before the timeout is judged: a first look that outlasts the wait (a slow host) still says
            # that it waited, and for whom
            if on_wait is not None and (said is None or looked - said >= 10):
                on_wait(f"waiting for free GPUs ({looked:.0f} of {timeout_s:.0f} s): {busy.message}")
                said = looked
            waited = clock() - start
            if waited >= timeout_s:
                raise GpusBusy(f"still busy after waiting {waited:.0f} s: {busy.message}",
                               "wait longer (`--wait-idle SECONDS`), choose other GPUs (`--gpus`), or run and "
                               "judge anyway with `--allow-busy`") from None
            sleep(min(WAIT_STEP_S, max(0.0, timeout_s - waited)))


def unhealthy_gpus(conn: Connection) -> dict[int, str]:
    """GPU index -> the finding that makes it UNHEALTHY, from one `nvidia-smi -q` (checks.health); {} when it
    cannot be read (the pick goes on as before)."""
    from devenv.checks.health import health_probe, judge_health, sick_gpus

    try:
        result = conn.run(health_probe(), timeout=30)
    except DevenvError:
        return {}
    return sick_gpus(judge_health(result.stdout, result.exit_code, None))


def gpu_picker(conn: Connection, host: str, *, allow_busy: bool = False,
               on_note: Callable[[str], None] | None = None) -> Callable[[int], str]:
    """For `up` (provision.UpOptions.pick_gpus): count -> the least used free GPUs of the host, as "1,3".
    Raises NotEnoughFreeGpus (exit 1) naming the busy GPUs and their users, unless allow_busy."""
    def pick_now(count: int) -> str:
        occ = sample(conn)
        if not occ.gpus:
            raise DevenvError(f"cannot pick GPUs on {host}: {occ.error}", "check the driver with `devenv check`")
        states = gpu_choose.mark_unhealthy(gpu_choose.gpu_states(occ), unhealthy_gpus(conn))
        names: dict[str, str] | None = None
        if any(o.container for s in states for o in s.others):
            from devenv.services.monitor import container_names

            names = container_names(conn)
        if names:
            states = [replace(s, others=tuple(replace(o, container=names.get(o.container, o.container))
                                              if o.container else o for o in s.others)) for s in states]
        choice = gpu_choose.choose(states, count, host=host, allow_busy=allow_busy)
        for s in choice.busy_taken:
            if on_note is not None:
                on_note(f"{s.describe()}: taken anyway (--allow-busy)")
        for s in choice.skipped:
            if on_note is not None:
                on_note(f"{s.describe()}: not picked")
        return choice.gpus
    return pick_now
