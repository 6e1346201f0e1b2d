"""known_hosts checking as OpenSSH does it: known & matching -> ok, unknown -> refuse unless the user said
--accept-new-host (then record it), changed -> always refuse.

Reads OpenSSH's format itself (plain, wildcard and hashed `|1|salt|hash` names, `[host]:port` for non-22
ports, `@revoked` markers), so one malformed line never hides the others. Keys are compared as raw blobs;
fingerprints are OpenSSH's `SHA256:<base64 without padding>`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from devenv.config import paths
from devenv.errors import HostKeyError

_write_lock = threading.Lock()


@dataclass(frozen=True)
class KnownKey:
    key_type: str
    blob: bytes
    revoked: bool = False


def fingerprint(blob: bytes) -> str:
    digest = base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    return f"SHA256:{digest}"


def entry_name(hostname: str, port: int) -> str:
    return hostname if port == 22 else f"[{hostname}]:{port}"


def short_type(key_type: str) -> str:
    """'ssh-ed25519' -> 'ED25519', as `ssh` prints it."""
    if key_type.startswith("ecdsa"):
        return "ECDSA"
    return key_type.removeprefix("ssh-").upper()


def known_keys(hostname: str, port: int, path: Path | None = None) -> list[KnownKey]:
    path = path or paths.known_hosts_path()
    try:
        lines = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return []
    name = entry_name(hostname, port)
    found = []
    for line in lines:
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        marker = fields.pop(0) if fields[0].startswith("@") else None
        if marker == "@cert-authority" or len(fields) < 3:
            continue  # host certificates are not supported (paramiko has no verifier for them)
        try:
            blob = base64.b64decode(fields[2], validate=True)
        except (binascii.Error, ValueError):
            continue
        if _names_match(fields[0], name):
            found.append(KnownKey(fields[1], blob, revoked=marker == "@revoked"))
    return found


def preferred_key_types(known: list[KnownKey]) -> list[str]:
    """Host-key algorithms to ask for first, so a host with several keys shows the one we know (as ssh does)."""
    names = []
    for k in known:
        if k.key_type == "ssh-rsa":
            names += ["rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"]
        else:
            names.append(k.key_type)
    return list(dict.fromkeys(names))


def verify(label: str, hostname: str, port: int, key_type: str, blob: bytes, *, accept_new: bool,
           path: Path | None = None) -> None:
    """Raise HostKeyError unless the presented key is known for host:port (or was just accepted)."""
    path = path or paths.known_hosts_path()
    name = entry_name(hostname, port)
    known = known_keys(hostname, port, path)
    presented = f"{short_type(key_type)} key {fingerprint(blob)}"
    if any(k.revoked and k.blob == blob for k in known):
        raise HostKeyError(f"host key for {label} ({name}) is marked @revoked in {path}: {presented}",
                           "do not connect; ask the host's admin for the current key")
    trusted = [k for k in known if not k.revoked]
    if any(k.blob == blob for k in trusted):
        return
    if trusted:
        same_type = [k for k in trusted if k.key_type == key_type] or trusted
        was = ", ".join(f"{short_type(k.key_type)} key {fingerprint(k.blob)}" for k in same_type)
        raise HostKeyError(
            f"HOST KEY CHANGED for {label} ({name}): {path} has {was}, the host now presents {presented}. "
            "Someone may be intercepting the connection (man-in-the-middle), or the host was reinstalled",
            f"do not accept it blindly: confirm the new fingerprint with the host's admin, then remove the old "
            f"entry with `ssh-keygen -f {path} -R '{name}'` and re-run with --accept-new-host",
        )
    if not accept_new:
        host_file = f"/etc/ssh/ssh_host_{short_type(key_type).lower()}_key.pub"
        raise HostKeyError(
            f"host key for {label} ({name}) is not known: {presented}",
            "re-run with --accept-new-host to trust and record it (verify the fingerprint with the host's admin "
            f"/ `ssh-keygen -lf {host_file}` on the host)",
        )
    record(name, key_type, blob, path)


def record(name: str, key_type: str, blob: bytes, path: Path) -> None:
    """Append one known_hosts line; a new file is 0600 in a 0700 directory."""
    line = f"{name} {key_type} {base64.b64encode(blob).decode()}\n"
    with _write_lock:
        if not path.parent.exists():
            path.parent.mkdir(parents=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "a") as f:
            if f.tell() > 0 and not path.read_bytes().endswith(b"\n"):
                line = "\n" + line
            f.write(line)


def _names_match(field: str, name: str) -> bool:
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
        if _glob(pattern.lstrip("!")).fullmatch(name.lower()):
            if negated:
                return False
            matched = True
    return matched


def _glob(pattern: str) -> re.Pattern:
    """OpenSSH patterns: only * and ? are wildcards (brackets in `[host]:port` are literal)."""
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern.lower()))
