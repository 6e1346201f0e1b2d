"""Which GPUs to use (L0): what `gpus:` / `--gpus` ask for, each GPU free or busy (by whom), and the pick of
N free ones (least used first) from one occupancy sample. Pure functions: the sample is taken elsewhere.

Spelling, as Docker's `--gpus` does it: a number is a count, indices are a list.
  all | none          every GPU / no GPU
  2                   two free GPUs, picked when the environment is made (stored as "free:2")
  0,1  [0, 1]  device=1   exactly these GPUs (nvidia-smi's indices on the host)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from devenv.errors import DevenvError
from devenv.gpu.occupancy import UNATTRIBUTED_UTIL_PCT, Occupancy, RunIdentity, Sharer, describe_gpu

FREE_PREFIX = "free:"
MAX_GPUS = 1024


def parse_gpus(text: str) -> str:
    """A user's spelling -> the canonical string (all | none | free:N | 0,1). ValueError says what is wrong."""
    value = str(text).strip().lower()
    if value in ("all", "none"):
        return value
    if re.fullmatch(r"\d+", value):
        count = int(value)
        if count == 0:
            raise ValueError("0 GPUs: write 'none' for an environment without GPUs")
        if count > MAX_GPUS:
            raise ValueError(f"{count} GPUs is more than any host has")
        return f"{FREE_PREFIX}{count}"
    if value.startswith(FREE_PREFIX) and re.fullmatch(r"[1-9]\d*", value[len(FREE_PREFIX):]):
        return value
    body = value[len("device="):] if value.startswith("device=") else value
    if re.fullmatch(r"\d+(\s*,\s*\d+)*,?", body) and ("," in body or value.startswith("device=")):
        ids = [int(x) for x in body.split(",") if x.strip()]
        if any(i >= MAX_GPUS for i in ids):
            raise ValueError(f"GPU index {max(ids)} is out of range")
        if len(set(ids)) != len(ids):
            raise ValueError(f"GPU indices repeat in '{text}'")
        return ",".join(str(i) for i in ids)
    raise ValueError(f"expected all, none, a count (2) or GPU indices (0,1 or device=1), got '{text}'")


def count_of(gpus: str) -> int | None:
    """N for 'free:N', else None."""
    return int(gpus[len(FREE_PREFIX):]) if gpus.startswith(FREE_PREFIX) else None


def indices_of(gpus: str) -> list[int] | None:
    """The indices of '0,1', else None (all, none, free:N)."""
    if gpus in ("all", "none") or gpus.startswith(FREE_PREFIX):
        return None
    return [int(x) for x in gpus.split(",") if x.strip()]


def describe_ask(gpus: str) -> str:
    count = count_of(gpus)
    if count is not None:
        return f"{count} free GPU{'s' if count > 1 else ''}"
    return {"all": "all GPUs", "none": "no GPU"}.get(gpus, f"GPU {gpus}")


# --- free or busy ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GpuState:
    index: int
    uuid: str | None
    util_pct: int | None
    mem_used_mib: int | None
    mem_total_mib: int | None
    others: tuple[Sharer, ...] = ()   # processes that are not ours (or one unnamed, for an unexplained load)
    unhealthy: str | None = None      # the health finding that makes it UNHEALTHY (checks.health): never picked

    @property
    def free(self) -> bool:
        return not self.others

    def describe(self) -> str:
        """'GPU 0 is free (0% util, 0 MiB used)' / 'GPU 0 is busy with pid 820 (root, python3, ...)'."""
        if self.unhealthy:
            return f"GPU {self.index} is UNHEALTHY ({self.unhealthy})"
        if self.free:
            return f"GPU {self.index} is free ({_num(self.util_pct)}% util, {_num(self.mem_used_mib)} MiB used)"
        return describe_gpu(self.index, list(self.others), "is busy with")

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "uuid": self.uuid, "free": self.free, "unhealthy": self.unhealthy,
                "util_pct": self.util_pct,
                "mem_used_mib": self.mem_used_mib, "mem_total_mib": self.mem_total_mib,
                "others": [s.to_dict() for s in self.others]}


def _num(value: object) -> str:
    return "?" if value is None else str(value)


def gpu_states(sample: Occupancy, me: RunIdentity | None = None) -> list[GpuState]:
    """Every GPU of the sample, with the processes on it that are not `me`'s (all of them when me is None)."""
    out = []
    for g in sample.gpus:
        if g.index is None:
            continue
        others = []
        for p in sample.processes:
            if p.gpu_uuid != g.uuid or (me is not None and me.owns(p, sample.chains.get(p.pid, ()))):
                continue
            others.append(Sharer(g.index, g.uuid, p.pid, p.user, p.name, p.used_mib, p.container, g.util_pct))
        mine = any(p.gpu_uuid == g.uuid for p in sample.processes)
        if not others and not mine and (g.util_pct or 0) >= UNATTRIBUTED_UTIL_PCT:
            others.append(Sharer(g.index, g.uuid, None, util_pct=g.util_pct))
        out.append(GpuState(g.index, g.uuid, g.util_pct, g.mem_used_mib, g.mem_total_mib, tuple(others)))
    return sorted(out, key=lambda s: s.index)


def mark_unhealthy(states: list[GpuState], sick: dict[int, str]) -> list[GpuState]:
    """The states with each sick GPU's finding (GPU index -> 'Remapped Rows > Pending: Yes')."""
    return [replace(s, unhealthy=sick[s.index]) if s.index in sick else s for s in states]


def _load(state: GpuState) -> tuple[int, int, float, int]:
    """Least used first: fewest other processes, least memory used, lowest utilisation, then the index."""
    return (len(state.others), state.mem_used_mib or 0, state.util_pct or 0, state.index)


class NotEnoughFreeGpus(DevenvError):
    """Fewer free GPUs than asked for: which are busy, and by whom."""

    exit_code = 1


@dataclass(frozen=True)
class Choice:
    indices: tuple[int, ...]
    uuids: tuple[str | None, ...]
    busy_taken: tuple[GpuState, ...] = ()   # busy GPUs taken anyway (allow_busy)
    skipped: tuple[GpuState, ...] = ()      # UNHEALTHY GPUs left out of the pick

    @property
    def gpus(self) -> str:
        """The canonical string of exactly these GPUs ('0,1')."""
        return ",".join(str(i) for i in self.indices)


def choose(states: list[GpuState], count: int, *, host: str = "the host", allow_busy: bool = False,
           among: list[int] | None = None) -> Choice:
    """`count` GPUs: free ones first, least used first; busy ones only with allow_busy. `among` limits the
    candidates (an environment's own GPUs). UNHEALTHY GPUs are never picked, even with allow_busy (Choice.skipped
    says which). Raises NotEnoughFreeGpus naming the busy and the unhealthy GPUs."""
    candidates = [s for s in states if among is None or s.index in among]
    sick = tuple(s for s in candidates if s.unhealthy)
    pool = [s for s in candidates if not s.unhealthy]
    if count > len(pool) and sick:
        raise NotEnoughFreeGpus(f"{count} GPU{'s' if count > 1 else ''} asked for, but only {len(pool)} of "
                                f"{len(candidates)} on {host} {'is' if len(pool) == 1 else 'are'} healthy: "
                                + "; ".join(s.describe() for s in sick),
                                "each finding's remedy is in `devenv check HOST`; ask for fewer GPUs meanwhile")
    if count > len(pool):
        what = f"{len(pool)} GPU{'s' if len(pool) != 1 else ''}" if pool else "no GPU"
        raise NotEnoughFreeGpus(f"{count} GPUs were asked for, but {host} has {what}"
                                + (f" here (GPUs {', '.join(str(i) for i in among)})" if among is not None else ""),
                                f"ask for at most {len(pool)} (`--gpus {len(pool)}`)" if pool else
                                "check the driver with `devenv check`")
    free = sorted((s for s in pool if s.free), key=_load)
    busy = sorted((s for s in pool if not s.free), key=_load)
    if len(free) < count and not allow_busy:
        lines = "; ".join(s.describe() for s in busy)
        raise NotEnoughFreeGpus(
            f"{count} free GPU{'s' if count > 1 else ''} asked for, but only {len(free)} of {len(pool)} on "
            f"{host} {'is' if len(free) == 1 else 'are'} free: {lines}",
            f"ask for fewer (`--gpus {len(free)}`)" * bool(free)
            + ("; " if free else "") + "name the GPUs to share (`--gpus 0,1`), wait until they are free, "
            "or take the least used anyway with `--allow-busy`")
    picked = sorted((free + busy)[:count], key=lambda s: s.index)
    return Choice(tuple(s.index for s in picked), tuple(s.uuid for s in picked),
                  tuple(s for s in picked if not s.free), sick)
