"""Checks for values that reach a command line, a config file or a path (L0: pure, no I/O).

Each check returns None when the value is fine, or a short problem ("starts with '-'", "holds a newline")
that never repeats the value itself: a private key pasted by mistake must not be printed back. `preview`
gives the few characters an error may show.
"""

from __future__ import annotations

import math
import re
import unicodedata

MAX_STRING = 4096
# Line and paragraph separators are not Cc but end a line for some readers all the same.
_LINE_BREAKS = {"\u2028", "\u2029"}

_HOSTNAME = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,252})")
_IPV6 = re.compile(r"[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*(?:%[A-Za-z0-9_.-]+)?")
_ALIAS = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,254}")
_USER = re.compile(r"[A-Za-z0-9._][A-Za-z0-9._-]{0,63}")
# docker's reference grammar, loosely: [registry[:port]/]path[:tag][@digest]
_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*(?::[0-9]{1,5}/[A-Za-z0-9._/-]+)?"
                    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?")
# A pip requirement as a word: name[extras] and version clauses; no URL (@), marker (;), space or option.
_PIP_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,126}[A-Za-z0-9])?"
_PIP_CLAUSE = r"(?:===|~=|==|!=|<=|>=|<|>)[A-Za-z0-9.*+!_-]{1,64}"
_PIP_SPEC = re.compile(rf"{_PIP_NAME}(?:\[{_PIP_NAME}(?:,{_PIP_NAME})*\])?(?:{_PIP_CLAUSE}(?:,{_PIP_CLAUSE})*)?")
# A Debian package: name[:arch][=version] (policy 5.6.1 and 5.6.12).
_APT_PACKAGE = re.compile(r"[a-z0-9][a-z0-9+.-]{1,127}(?::[a-z0-9-]{1,32})?(?:=[A-Za-z0-9.+:~_-]{1,128})?")
_PROGRAM = re.compile(r"[A-Za-z0-9_./+~-]{1,255}")
_DIGITS = re.compile(r"[0-9]{1,18}")


def text_problem(value: str, limit: int = MAX_STRING) -> str | None:
    """Control characters (newline, NUL, escape...) or an over-long string: the kind of problem, or None."""
    if len(value) > limit:
        return f"is too long ({len(value)} characters, at most {limit})"
    for ch in value:
        if ch == "\n" or ch == "\r":
            return "holds a line break"
        if ch == "\0":
            return "holds a NUL character"
        if ch in _LINE_BREAKS or unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp"):
            return f"holds a control character (U+{ord(ch):04X})"
    return None


def option_problem(value: str) -> str | None:
    """A value that a command line could read as an option."""
    if value.startswith("-"):
        return "starts with '-' (it would be read as an option)"
    return text_problem(value)


def option_shaped(value: str, shape: re.Pattern[str], not_shaped: str) -> str | None:
    """option_problem's problem; else not_shaped when value is not all of shape; else None (a value that may
    stand as one argument, with no option or control character in it, of a known shape)."""
    return option_problem(value) or (None if shape.fullmatch(value) else not_shaped)


def hostname_problem(value: str) -> str | None:
    problem = option_problem(value)
    if problem:
        return problem
    if not value:
        return "is empty"
    bare = value[1:-1] if value.startswith("[") and value.endswith("]") else value
    if _HOSTNAME.fullmatch(bare) or _IPV6.fullmatch(bare):
        return None
    return "is not a host name or an IP address (letters, digits, '.', '-', '_')"


def alias_problem(value: str) -> str | None:
    return option_shaped(value, _ALIAS, "is not an ssh config Host name (letters, digits, '.', '_', '+', '-')")


def user_problem(value: str) -> str | None:
    return option_shaped(value, _USER, "is not a user name (letters, digits, '.', '_', '-'; at most 64)")


def path_problem(value: str) -> str | None:
    """A local path that is passed as an argument or written into an ssh config (quoted, so no '\"')."""
    problem = option_problem(value)
    if problem:
        return problem
    if not value:
        return "is empty"
    if '"' in value:
        return "holds a double quote (it cannot be quoted safely in an ssh config)"
    return local_path_problem(value)


def local_path_problem(value: str) -> str | None:
    """A path the OS could not even look up (a name over 255 bytes, a path over 4,096)."""
    problem = text_problem(value)
    if problem:
        return problem
    if len(value.encode()) > 4000 or any(len(part.encode()) > 255 for part in value.split("/")):
        return "is too long for a path"
    return None


def container_path_problem(value: str) -> str | None:
    problem = text_problem(value, 1024)
    if problem:
        return problem
    if not value.startswith("/"):
        return "is not an absolute path inside the container (start it with '/')"
    if ":" in value or "," in value:
        return "holds ':' or ',' (docker reads them as mount options)"
    if "/../" in value + "/" or value.endswith("/.."):
        return "holds '..'"
    return None


def volume_path_problem(value: str) -> str | None:
    """A volume's mount path: a container path, and not the container's root (docker mounts nothing on /)."""
    problem = container_path_problem(value)
    if problem:
        return problem
    if all(part in ("", ".") for part in value.split("/")):
        return "is the container's root (/): a volume cannot be mounted there"
    return None


def image_problem(value: str) -> str | None:
    problem = option_problem(value)
    if problem:
        return problem
    if not value:
        return "is empty"
    if len(value) > 255 or not _IMAGE.fullmatch(value):
        return "is not an image reference like 'devenv/pytorch:cu128' or 'registry:5000/name:tag'"
    return None


def program_problem(value: str) -> str | None:
    return option_shaped(value, _PROGRAM,
                         "is not a program name or path (letters, digits, '.', '_', '/', '+', '-')")


def pip_spec_problem(value: str) -> str | None:
    """One pip requirement (numpy, torch==2.8.0, rich[jupyter]>=13,<14): never an option, a URL, a path or
    anything a shell would read (the build passes each as one argument, with globbing off)."""
    return option_shaped(value, _PIP_SPEC, "is not a pip requirement (name[extras] with ==, >=, <, ~= versions; "
                                           "no options, URLs, paths, spaces or shell characters)")


def apt_package_problem(value: str) -> str | None:
    """One apt package (ffmpeg, libsndfile1=1.2.0-1, gcc:amd64): never an option or shell text."""
    return option_shaped(value, _APT_PACKAGE, "is not a Debian package name (lower-case letters, digits, '+', '-', "
                                              "'.'; =VERSION optional)")


def parse_int(text: str, lo: int, hi: int) -> int | None:
    """An ASCII decimal integer in [lo, hi], or None (no unicode digits, no 5,000-digit numbers)."""
    text = text.strip()
    if not _DIGITS.fullmatch(text):
        return None
    value = int(text)
    return value if lo <= value <= hi else None


def parse_number(text: str, lo: float, hi: float, lo_open: bool = True) -> float | None:
    """A finite number in (lo, hi] (or [lo, hi]), ASCII only; nan, inf and 1e300 are None."""
    text = text.strip()
    if not text.isascii() or len(text) > 40 or not re.fullmatch(r"[0-9.eE+-]+", text):
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if finite_in(value, lo, hi, lo_open) else None


def finite_in(value: float, lo: float, hi: float, lo_open: bool = True) -> bool:
    if not math.isfinite(value) or value > hi:
        return False
    return value > lo if lo_open else value >= lo


def preview(value: object, width: int = 16) -> str:
    """What an error may show of a value: a short escaped prefix, nothing of a multi-line one (a key?)."""
    text = str(value)
    if "\n" in text or "PRIVATE KEY" in text or "BEGIN " in text:
        return f"a multi-line value ({len(text)} characters)" if "\n" in text else f"a value of {len(text)} characters"
    shown = text[:width].encode("unicode_escape").decode("ascii")
    more = f"... ({len(text)} characters)" if len(text) > width else ""
    return f"'{shown}{more}'" if more else f"'{shown}'"
