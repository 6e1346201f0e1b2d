"""What `devenv image push` decides and reports (L0, no I/O): which hosts need the image, and each host's end.

A host that already has an image of the same id is skipped: the id is the digest of the image's config, the
same in docker and podman, so it says "the same image" across engines, whatever the name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from devenv.env.engines import bare_image_id

PUSHED, SKIPPED, FAILED = "pushed", "skipped", "failed"


@dataclass(frozen=True)
class HostImage:
    """One host's answer for the image: its id there (None: the host has no such image) and size in bytes."""

    host: str
    image_id: str | None
    size_bytes: int | None = None

    def same_as(self, other: HostImage) -> bool:
        return (self.image_id is not None and other.image_id is not None
                and bare_image_id(self.image_id) == bare_image_id(other.image_id))


def parse_inspect(host: str, stdout: str) -> HostImage:
    """`image inspect --format '{{.Id}} {{.Size}}'` output."""
    image_id, _, size = stdout.strip().partition(" ")
    return HostImage(host, bare_image_id(image_id) or None, int(size) if size.strip().isdigit() else None)


def needs_push(source: HostImage, dest: HostImage) -> bool:
    return not dest.same_as(source)


@dataclass(frozen=True)
class PushResult:
    """One destination's end: pushed (bytes, seconds), skipped (it had the image), or failed (why, and what
    is left there: nothing, since a cut stream never reaches the engine's load as a whole archive)."""

    host: str
    outcome: str                  # pushed | skipped | failed
    image_id: str | None = None   # the id on the host afterwards (verified), when pushed or skipped
    bytes_moved: int = 0
    seconds: float = 0.0
    error: str | None = None
    hint: str | None = None
    exit_code: int = 0

    @property
    def rate_bytes_s(self) -> float | None:
        return self.bytes_moved / self.seconds if self.seconds > 0 and self.bytes_moved else None

    def describe(self) -> str:
        short = (self.image_id or "")[:12]
        if self.outcome == SKIPPED:
            return f"{self.host}: skipped, it has the same image ({short})"
        if self.outcome == PUSHED:
            return (f"{self.host}: pushed {human_bytes(self.bytes_moved)} in {self.seconds:.1f} s "
                    f"({human_rate(self.bytes_moved, self.seconds)}), image {short} verified")
        return f"{self.host}: failed after {human_bytes(self.bytes_moved)}: {self.error}"

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "outcome": self.outcome, "image_id": self.image_id,
                "bytes": self.bytes_moved, "seconds": round(self.seconds, 3),
                "rate_bytes_s": round(self.rate_bytes_s) if self.rate_bytes_s else None,
                "error": self.error, "hint": self.hint, "exit_code": self.exit_code}


def human_bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"  # unreachable: GB ends the loop


def human_rate(n: float, seconds: float) -> str:
    return f"{human_bytes(n / seconds)}/s" if seconds > 0 else "-"


def progress_line(host: str, moved: int, seconds: float, total: int | None) -> str:
    """'gpu2: 312.0 MB of ~1.4 GB at 104.0 MB/s' (the total is the image's size: the archive is about that)."""
    of = f" of ~{human_bytes(total)}" if total else ""
    return f"{host}: {human_bytes(moved)}{of} at {human_rate(moved, seconds)}"
