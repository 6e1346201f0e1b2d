"""`devenv sanity`: bundled on-host scripts (scripts/, run with torch on the GPU host), the per-SKU table
(data/gpu_skus.yaml) and the verdict (verdict.py). Nothing here imports torch."""

from __future__ import annotations

from pathlib import Path

SCRIPTS_DIR = Path(__file__).parent / "scripts"
SCRIPT_NAME = "sanity_run.py"


def script_path() -> Path:
    return SCRIPTS_DIR / SCRIPT_NAME


def script_bytes() -> bytes:
    """The self-contained on-host program, as shipped over SSH."""
    return script_path().read_bytes()
