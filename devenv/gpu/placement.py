"""Which host of a group `up @group` takes (L0, no I/O): from each host's look (gpu.fleet) and whether it has the
environment's image, a choice with its reason and every host passed over with its own.

    fits        answered; enough free GPUs (N) that the health gate has not marked (for N > 0)
    then        the image already there (a host whose environments need no image counts as having it)
    then        least loaded: mean GPU utilisation, then the share of GPU memory in use, then more free GPUs
    then        the name (a stable order)
No host fits: one NoHostFits whose message lists every host and why.
"""

from __future__ import annotations

from dataclasses import dataclass

from devenv.errors import DevenvError
from devenv.gpu.choose import count_of, indices_of
from devenv.gpu.fleet import DOWN, ERROR, NO_GPU, OK, GpuRow, HostGpus

# What the health gate (issue 26) may write in GpuRow.health for a GPU fit to use; any other word keeps the GPU
# out of the count; None is "not judged" (no gate ran): usable.
HEALTHY_WORDS = ("ok", "pass", "healthy")


def gpus_needed(gpus: str) -> int:
    """How many free GPUs an environment's `gpus` (canonical: all | none | free:N | 0,1) asks of a host."""
    count = count_of(gpus)
    if count is not None:
        return count
    indices = indices_of(gpus)
    if indices is not None:
        return len(indices)
    return 1 if gpus == "all" else 0


@dataclass(frozen=True)
class Candidate:
    """One host of the group, as the choice sees it."""

    look: HostGpus
    has_image: bool | None      # None: its environments run from no image (nothing to have)
    image: str = ""

    @property
    def host(self) -> str:
        return self.look.host

    @property
    def usable_free(self) -> list[GpuRow]:
        return [g for g in self.look.gpus if g.free and (g.health is None or g.health.lower() in HEALTHY_WORDS)]

    @property
    def mean_util(self) -> float:
        utils = [g.util_pct or 0 for g in self.look.gpus]
        return sum(utils) / len(utils) if utils else 0.0

    @property
    def mem_share(self) -> float:
        total = sum(g.mem_total_mib or 0 for g in self.look.gpus)
        return sum(g.mem_used_mib or 0 for g in self.look.gpus) / total if total else 0.0

    def unfit(self, need: int) -> str | None:
        """Why the host cannot take the environment (None: it can)."""
        state = self.look.state
        if state == DOWN:
            return f"not reachable: {self.look.reason}"
        if state == ERROR:
            return f"its GPUs do not answer: {self.look.reason}"
        if need == 0:
            return None
        if state == NO_GPU:
            return f"no GPU ({self.look.reason})"
        free, total = len(self.usable_free), len(self.look.gpus)
        if free >= need:
            return None
        busy = [f"GPU {g.index}: {'; '.join(g.users)}" for g in self.look.gpus if g.users]
        unhealthy = [f"GPU {g.index}: {g.health}" for g in self.look.gpus
                     if g.free and g.health is not None and g.health.lower() not in HEALTHY_WORDS]
        return (f"{free} of {total} GPU{'s' if total != 1 else ''} free, {need} needed"
                + (f" ({', '.join(busy + unhealthy)})" if busy or unhealthy else ""))

    def describe(self, need: int) -> str:
        parts = []
        if self.look.state == OK:
            parts.append(f"{len(self.usable_free)} of {len(self.look.gpus)} GPUs free"
                         + (f" ({need} needed)" if need else ""))
            parts.append(f"mean GPU utilisation {self.mean_util:.0f}%, {self.mem_share * 100:.0f}% of GPU memory used")
        elif self.look.state == NO_GPU:
            parts.append("no GPU, none needed")
        if self.has_image is True:
            parts.append(f"has {self.image}")
        elif self.has_image is False:
            parts.append(f"lacks {self.image}")
        return ", ".join(parts)

    def rank(self) -> tuple[bool, float, float, int, str]:
        return (self.has_image is False, round(self.mean_util, 1), round(self.mem_share, 3), -len(self.usable_free),
                self.host)


@dataclass(frozen=True)
class Placement:
    host: str
    why: str
    passed_over: tuple[tuple[str, str], ...]   # (host, why not)

    def to_dict(self) -> dict[str, object]:
        return {"host": self.host, "why": self.why, "passed_over": {h: r for h, r in self.passed_over}}


class NoHostFits(DevenvError):
    """Not one host of the group can take the environment: each host's reason."""

    exit_code = 1


def place(group: str, candidates: list[Candidate], need: int) -> Placement:
    """The host to take (see the module's docstring), or NoHostFits naming every host's reason."""
    reasons = {c.host: c.unfit(need) for c in candidates}
    fits = sorted((c for c in candidates if reasons[c.host] is None), key=Candidate.rank)
    if not fits:
        lines = "; ".join(f"{c.host}: {reasons[c.host]}" for c in candidates)
        raise NoHostFits(f"no host of {group} can take it ({need} free GPU{'s' if need != 1 else ''} needed): "
                         f"{lines}",
                         "ask for fewer GPUs (--gpus N), wait for GPUs to free up (devenv gpus " + group + "), "
                         "or add a host to the group")
    best = fits[0]
    passed: list[tuple[str, str]] = []
    for c in candidates:
        if c is best:
            continue
        why_not = reasons[c.host]
        if why_not is None:
            if c.has_image is False and best.has_image is not False:
                why_not = f"fits, but lacks {c.image} ({best.host} has it)"
            elif c.rank()[1:3] != best.rank()[1:3]:
                why_not = f"fits, but {best.host} is less loaded ({c.describe(need)})"
            elif len(c.usable_free) != len(best.usable_free):
                why_not = f"fits, but {best.host} has more free GPUs ({c.describe(need)})"
            else:
                why_not = f"fits as well; {best.host} comes first by name"
        passed.append((c.host, why_not))
    first = "the only host that fits" if len(fits) == 1 else "the best fit"
    return Placement(best.host, f"{best.host}: {first}: {best.describe(need)}", tuple(passed))
