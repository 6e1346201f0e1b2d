"""JSON with comments and trailing commas (JSONC, as devcontainer.json is written): L0, standard library only.

Comments become spaces (newlines kept), and a comma followed only by whitespace/comments before `}` or `]` is
dropped; then the standard json module parses the text, so its error positions are the file's own lines.
"""

from __future__ import annotations

import json
from typing import Any

from devenv.errors import ProfileError


def strip(text: str) -> str:
    """text as plain JSON: comments blanked, trailing commas removed, every string left exactly as it was."""
    out = list(text)
    i, n = 0, len(text)
    pending_comma: int | None = None
    while i < n:
        c = text[i]
        if c == '"':
            pending_comma = None
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
            continue
        if c == "/" and text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            out[i:end] = " " * (end - i)
            i = end
            continue
        if c == "/" and text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise ProfileError(f"line {text.count(chr(10), 0, i) + 1}: a /* comment is never closed",
                                   "close it with */")
            for j in range(i, end + 2):
                if out[j] != "\n":
                    out[j] = " "
            i = end + 2
            continue
        if c == ",":
            pending_comma = i
        elif c in "}]":
            if pending_comma is not None:
                out[pending_comma] = " "
            pending_comma = None
        elif not c.isspace():
            pending_comma = None
        i += 1
    return "".join(out)


def loads(text: str, source: str = "<jsonc>") -> Any:
    try:
        return json.loads(strip(text))
    except json.JSONDecodeError as exc:
        raise ProfileError(f"{source}:{exc.lineno}:{exc.colno}: {exc.msg}",
                           "devcontainer.json is JSON with // and /* */ comments and trailing commas") from None
    except RecursionError:  # json's decoder recurses per nesting level
        raise ProfileError(f"{source}: nested too deeply", "devcontainer.json is a few levels of objects") from None
