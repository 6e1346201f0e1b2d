"""Check results (L0): one model for `check`, `compat` findings and sanity verdicts to render alike."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

PASS, WARN, FAIL, SKIP, INFO = "pass", "warn", "fail", "skip", "info"
STATUSES = (PASS, WARN, FAIL, SKIP, INFO)


@dataclass(frozen=True)
class CheckResult:
    id: str            # stable key for scripts, e.g. "docker.daemon"
    title: str         # what was checked, for people
    status: str        # pass | warn | fail | skip | info
    value: str         # what was seen
    remedy: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class CheckReport:
    host: str
    env: str | None
    checks: list[CheckResult]
    elapsed_s: float = 0.0

    @property
    def failed(self) -> list[CheckResult]:
        return [c for c in self.checks if c.status == FAIL]

    @property
    def ok(self) -> bool:
        return not self.failed

    def counts(self) -> dict[str, int]:
        return {s: sum(1 for c in self.checks if c.status == s) for s in STATUSES}

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "env": self.env,
            "ok": self.ok,
            "counts": self.counts(),
            "elapsed_s": round(self.elapsed_s, 3),
            "checks": [c.to_dict() for c in self.checks],
        }
