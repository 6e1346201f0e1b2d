"""OpenSSH's known_hosts lines (L1): the entries whose host pattern matches a name (plain, wildcard and hashed
`|1|salt|hash` names, @revoked and @cert-authority markers), and key fingerprints as ssh prints them. What both
the files (remote.hostkeys) and a KnownHostsCommand's answer (remote.known_hosts_command) are read with."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class KnownKey:
    key_type: str
    blob: bytes
    revoked: bool = False
    ca: bool = False
    source: str = ""


def fingerprint(blob: bytes) -> str:
    digest = base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    return f"SHA256:{digest}"


def entries_for(name: str, lines: list[str], source: str) -> list[KnownKey]:
    """The known_hosts lines (plain, @revoked, @cert-authority) whose host pattern matches name; a malformed
    line is skipped, never fatal."""
    found = []
    for line in lines:
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        marker = fields.pop(0) if fields[0].startswith("@") else None
        if marker not in (None, "@revoked", "@cert-authority") or len(fields) < 3:
            continue
        try:
            blob = base64.b64decode(fields[2], validate=True)
        except (binascii.Error, ValueError):
            continue
        if _names_match(fields[0], name):
            found.append(KnownKey(fields[1], blob, revoked=marker == "@revoked", ca=marker == "@cert-authority",
                                  source=source))
    return found


# --- host patterns ------------------------------------------------------------------------------------

def _names_match(field: str, name: str) -> bool:
    name = name.lower()
    if field.startswith("|1|"):
        try:
            salt_b64, hash_b64 = field[3:].split("|", 1)
            salt, want = base64.b64decode(salt_b64), base64.b64decode(hash_b64)
        except (ValueError, binascii.Error):
            return False
        return hmac.compare_digest(hmac.new(salt, name.encode(), hashlib.sha1).digest(), want)
    matched = False
    for pattern in field.split(","):
        negated = pattern.startswith("!")
        if _glob(pattern.lstrip("!")).fullmatch(name):
            if negated:
                return False
            matched = True
    return matched


def _glob(pattern: str) -> re.Pattern[str]:
    """OpenSSH patterns: only * and ? are wildcards (brackets in `[host]:port` are literal)."""
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern.lower()))
