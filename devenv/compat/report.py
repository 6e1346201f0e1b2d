"""Compat findings and the combined verdict (pure data; rendered by the CLI, reused by `check`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from devenv.checks.report import FAIL, PASS, UNKNOWN, WARN, CheckResult, Status

# Worst wins. A definite failure outranks "unknown": one sure reason it cannot run settles the verdict.
_RANK = {PASS: 0, WARN: 1, UNKNOWN: 2, FAIL: 3}

# What each verdict means for a person, and for a script's exit code (documented in `devenv compat --help`).
VERDICT_TEXT = {PASS: "runs", WARN: "runs, with limits", FAIL: "does not run", UNKNOWN: "cannot tell"}


@dataclass(frozen=True)
class Finding:
    """One judged pair (driver vs CUDA, GPU vs PyTorch build, ...).

    requires: what would make it run, for scripts: min_driver, full_driver, cuda_compat_package,
    torch_builds (wheel tags), cuda (a CUDA version whose image/build would work).
    """

    check: str  # stable id: "driver", "torch-arch", "toolkit-arch", "torch-build", "gpu"
    status: Status
    title: str
    value: str  # what was seen
    reason: str
    remedy: str | None = None
    source: str | None = None
    requires: dict[str, Any] = field(default_factory=dict)
    message: str | None = None  # the error the user will meet, word for word, when it fails

    def as_result(self) -> CheckResult:
        """For the one renderer: the reason as what was seen, the error word for word under it."""
        return CheckResult(self.check, self.title, self.status, self.reason, self.remedy,
                           {"message": self.message, "source": self.source, "requires": dict(self.requires)})

    def to_dict(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "status": self.status,
            "title": self.title,
            "value": self.value,
            "reason": self.reason,
            "remedy": self.remedy,
            "source": self.source,
            "requires": dict(self.requires),
            "message": self.message,
        }


def worst(statuses: list[Status]) -> Status:
    return max(statuses, key=_RANK.__getitem__) if statuses else UNKNOWN


@dataclass(frozen=True)
class CompatReport:
    inputs: dict[str, str | None]  # what was judged, as given (driver, cuda, gpu_cc, gpu_name, torch)
    findings: tuple[Finding, ...]

    @property
    def verdict(self) -> Status:
        return worst([f.status for f in self.findings])

    @property
    def runs(self) -> bool | None:
        """True when it runs (limits included), False when it does not, None when devenv cannot tell."""
        return {PASS: True, WARN: True, FAIL: False, UNKNOWN: None}[self.verdict]

    @property
    def deciding(self) -> list[Finding]:
        """The findings that set the verdict (all of the worst status)."""
        return [f for f in self.findings if f.status == self.verdict]

    @property
    def reason(self) -> str:
        if not self.findings:
            return "nothing to judge: give a CUDA version, a PyTorch build or a GPU"
        return "; ".join(f.reason for f in self.deciding)

    @property
    def remedies(self) -> list[str]:
        """Remedies of every finding short of a pass, worst first, without repeats."""
        ordered = sorted((f for f in self.findings if f.status != PASS), key=lambda f: -_RANK[f.status])
        seen: list[str] = []
        for f in ordered:
            if f.remedy and f.remedy not in seen:
                seen.append(f.remedy)
        return seen

    @property
    def requires(self) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for f in sorted(self.findings, key=lambda f: -_RANK[f.status]):
            if f.status == PASS:
                continue
            for key, value in f.requires.items():
                merged.setdefault(key, value)
        return merged

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict.value,
            "runs": self.runs,
            "summary": VERDICT_TEXT[self.verdict],
            "reason": self.reason,
            "remedy": self.remedies,
            "requires": self.requires,
            "inputs": dict(self.inputs),
            "findings": [f.to_dict() for f in self.findings],
        }
