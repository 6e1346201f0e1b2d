"""What every runtime does (L1): the part of DockerRuntime and HostRuntime that a backend may rely on alike.

A runtime runs environments on one host over one connection: a container engine (DockerRuntime) or the bare
host (HostRuntime). Each has more (images, volumes, launch); those are for its own backend only.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol


class Runtime(Protocol):
    kind: str  # "docker" | "host": the RuntimeKind it serves

    def close(self) -> None:
        """Release what the runtime opened (the connection belongs to the pool and stays)."""

    def logs(self, key: str, /, tail: int | str = ..., follow: bool = ...) -> Iterator[str]:
        """The environment's log lines; with follow, until the caller stops reading."""

    def exec(self, key: str, argv: list[str], /) -> tuple[int, str, str]:
        """(exit code, stdout, stderr) of argv run in the environment."""
