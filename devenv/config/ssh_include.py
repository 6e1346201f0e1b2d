"""The one line devenv may add to the user's ssh config: `Include <devenv's ssh config>`, at the very top.

ssh applies an Include to every host only before the first Host/Match block, hence the top. Adding puts that
exact line first and changes nothing else; removing takes out exactly that line and nothing else, so the
file after install + uninstall is the file before, byte for byte (L0: text only).
"""

from __future__ import annotations

from pathlib import Path


def include_line(devenv_config: Path) -> str:
    value = str(devenv_config)
    return f'Include "{value}"\n' if " " in value else f"Include {value}\n"


def has_include(text: str, line: str) -> bool:
    return line.rstrip("\n") in (ln.rstrip("\r") for ln in text.splitlines())


def is_at_top(text: str, line: str) -> bool:
    """The line comes before any Host or Match block (where ssh applies it to every host)."""
    for ln in text.splitlines():
        stripped = ln.strip()
        if stripped == line.strip():
            return True
        if stripped.lower().startswith(("host ", "match ", "host\t", "match\t")):
            return False
    return False


def add_include(text: str, line: str) -> str:
    """text with line as its first line (unchanged when the line is already there)."""
    return text if has_include(text, line) else line + text


def remove_include(text: str, line: str) -> str:
    """text without the line (each exact occurrence), every other byte kept."""
    wanted = line.rstrip("\n")
    kept = [ln for ln in text.splitlines(keepends=True) if ln.rstrip("\r\n") != wanted]
    return "".join(kept)
