"""Check results (L0): one status vocabulary and one result type for `check`, `compat` and `sanity`.

`check` makes CheckResults; a compat Finding (compat.report) and a sanity Check (sanity.verdict) keep the facts
their JSON carries and turn into a CheckResult (as_result) for the one renderer (cli.render.print_results).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any


class Status(str, Enum):
    """Every status word devenv prints or writes (JSON keeps the plain word: "pass", "no-gpu")."""

    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"         # not applicable here (no GPU to hand to containers, ...)
    INFO = "info"         # measured, judged against nothing
    UNKNOWN = "unknown"   # devenv's tables do not cover it: never guessed (compat)
    NO_GPU = "no-gpu"     # a sanity verdict: nothing about a GPU was proven
    NOT_JUDGED = "not-judged"  # a speed measured on a GPU another process was using: shown, never judged
    BUSY = "busy"         # a sanity verdict: a target GPU was shared, so its speed went unjudged
    UNHEALTHY = "unhealthy"  # a verdict: a GPU is sick (checks.health): its speed is not judged (exit 7)

    def __str__(self) -> str:
        return self.value


PASS, WARN, FAIL, SKIP, INFO = Status.PASS, Status.WARN, Status.FAIL, Status.SKIP, Status.INFO
UNKNOWN, NO_GPU = Status.UNKNOWN, Status.NO_GPU
STATUSES = (PASS, WARN, FAIL, SKIP, INFO)


@dataclass(frozen=True)
class CheckResult:
    id: str            # stable key for scripts, e.g. "docker.daemon"
    title: str         # what was checked, for people
    status: Status     # pass | warn | fail | skip | info (| unknown | no-gpu from compat and sanity)
    value: str         # what was seen
    remedy: str | None = None
    details: dict[str, Any] = field(default_factory=dict)   # for scripts; "message" and "source" are shown too

    def __post_init__(self) -> None:
        if not isinstance(self.status, Status):  # a plain word from a caller
            object.__setattr__(self, "status", Status(self.status))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class CheckReport:
    host: str
    env: str | None
    checks: list[CheckResult]
    elapsed_s: float = 0.0
    # the exit code when a check failed: 1, or 2 where the failure is the request itself (bad input, e.g. a
    # Slurm job asking for GPUs the partition lacks); not in to_dict (the exit code says it)
    fail_code: int = 1

    @property
    def failed(self) -> list[CheckResult]:
        return [c for c in self.checks if c.status == FAIL]

    @property
    def ok(self) -> bool:
        return not self.failed

    @property
    def unhealthy(self) -> list[CheckResult]:
        """The health findings that make a GPU UNHEALTHY (checks.health)."""
        return [c for c in self.checks if c.status == FAIL and c.details.get("unhealthy")]

    def counts(self) -> dict[str, int]:
        return {s: sum(1 for c in self.checks if c.status == s) for s in STATUSES}

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "env": self.env,
            "ok": self.ok,
            "unhealthy": bool(self.unhealthy),
            "counts": self.counts(),
            "elapsed_s": round(self.elapsed_s, 3),
            "checks": [c.to_dict() for c in self.checks],
        }
