"""The SSH algorithms devenv's paramiko transport may offer: those the user's ssh would offer for the host
(KexAlgorithms, Ciphers, MACs, HostKeyAlgorithms), in ssh's order, that paramiko also has.

paramiko alone offers more than OpenSSH 9.2 does (CBC ciphers, 3DES, hmac-md5), so devenv reached servers that
`ssh` refuses, and it ignored a config that narrows the lists (a hardened `KexAlgorithms` or
`HostKeyAlgorithms`). `ssh -G` prints each list final; devenv's own parser resolves the `+`, `-` and `^` forms
against OpenSSH 9.2's defaults, as readconf.c does. A list that leaves devenv nothing it can speak is refused
before dialling, naming the option; a server that shares nothing with the list fails its handshake, as ssh's.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence

from devenv.errors import ProfileError

# `ssh -G` of OpenSSH 9.2p1 (Debian 12) with an empty config: what each option is when the config says nothing
OPENSSH_DEFAULTS = {
    "kexalgorithms": "sntrup761x25519-sha512,sntrup761x25519-sha512@openssh.com,curve25519-sha256,"
                     "curve25519-sha256@libssh.org,ecdh-sha2-nistp256,ecdh-sha2-nistp384,ecdh-sha2-nistp521,"
                     "diffie-hellman-group-exchange-sha256,diffie-hellman-group16-sha512,"
                     "diffie-hellman-group18-sha512,diffie-hellman-group14-sha256",
    "ciphers": "chacha20-poly1305@openssh.com,aes128-ctr,aes192-ctr,aes256-ctr,aes128-gcm@openssh.com,"
               "aes256-gcm@openssh.com",
    "macs": "umac-64-etm@openssh.com,umac-128-etm@openssh.com,hmac-sha2-256-etm@openssh.com,"
            "hmac-sha2-512-etm@openssh.com,hmac-sha1-etm@openssh.com,umac-64@openssh.com,umac-128@openssh.com,"
            "hmac-sha2-256,hmac-sha2-512,hmac-sha1",
    "hostkeyalgorithms": "ssh-ed25519-cert-v01@openssh.com,ecdsa-sha2-nistp256-cert-v01@openssh.com,"
                         "ecdsa-sha2-nistp384-cert-v01@openssh.com,ecdsa-sha2-nistp521-cert-v01@openssh.com,"
                         "sk-ssh-ed25519-cert-v01@openssh.com,sk-ecdsa-sha2-nistp256-cert-v01@openssh.com,"
                         "rsa-sha2-512-cert-v01@openssh.com,rsa-sha2-256-cert-v01@openssh.com,ssh-ed25519,"
                         "ecdsa-sha2-nistp256,ecdsa-sha2-nistp384,ecdsa-sha2-nistp521,sk-ssh-ed25519@openssh.com,"
                         "sk-ecdsa-sha2-nistp256@openssh.com,rsa-sha2-512,rsa-sha2-256",
    # which of the user's keys are offered, by their signature algorithm (remote/auth.py)
    "pubkeyacceptedalgorithms": "ssh-ed25519-cert-v01@openssh.com,ecdsa-sha2-nistp256-cert-v01@openssh.com,"
                                "ecdsa-sha2-nistp384-cert-v01@openssh.com,ecdsa-sha2-nistp521-cert-v01@openssh.com,"
                                "sk-ssh-ed25519-cert-v01@openssh.com,sk-ecdsa-sha2-nistp256-cert-v01@openssh.com,"
                                "rsa-sha2-512-cert-v01@openssh.com,rsa-sha2-256-cert-v01@openssh.com,ssh-ed25519,"
                                "ecdsa-sha2-nistp256,ecdsa-sha2-nistp384,ecdsa-sha2-nistp521,"
                                "sk-ssh-ed25519@openssh.com,sk-ecdsa-sha2-nistp256@openssh.com,rsa-sha2-512,"
                                "rsa-sha2-256",
    # which signatures of a CA devenv accepts on a host certificate (hostkeys: not SHA-1 RSA, as ssh 9.2)
    "casignaturealgorithms": "ssh-ed25519,ecdsa-sha2-nistp256,ecdsa-sha2-nistp384,ecdsa-sha2-nistp521,"
                             "sk-ssh-ed25519@openssh.com,sk-ecdsa-sha2-nistp256@openssh.com,rsa-sha2-512,"
                             "rsa-sha2-256",
}
SPELLING = {"kexalgorithms": "KexAlgorithms", "ciphers": "Ciphers", "macs": "MACs",
            "hostkeyalgorithms": "HostKeyAlgorithms", "casignaturealgorithms": "CASignatureAlgorithms",
            "pubkeyacceptedalgorithms": "PubkeyAcceptedAlgorithms"}


def resolve(keyword: str, value: str | None) -> str:
    """The final list for a config value as ssh resolves it: `+x` appends to the default, `-x` removes (with
    wildcards), `^x` puts first, anything else replaces it."""
    default = OPENSSH_DEFAULTS[keyword].split(",")
    if not value:
        return ",".join(default)
    mark, rest = value[0], [a for a in value[1:].split(",") if a]
    if mark == "+":
        return ",".join(default + [a for a in rest if a not in default])
    if mark == "-":
        return ",".join(a for a in default if not any(fnmatch.fnmatchcase(a, p) for p in rest))
    if mark == "^":
        return ",".join(rest + [a for a in default if a not in rest])
    return value


def allowed(options: Mapping[str, object], keyword: str) -> list[str]:
    """The hop's list (ssh -G's, or the parser's resolved one; empty when `-` took everything out); OpenSSH's
    default for a hop that names no list at all."""
    if keyword not in options:
        return OPENSSH_DEFAULTS[keyword].split(",")
    return [a for a in str(options[keyword] or "").strip().split(",") if a]


def narrowed(options: Mapping[str, object], keyword: str, ours: Sequence[str], label: str) -> list[str]:
    """ssh's list for the hop, in ssh's order, less what paramiko lacks; ProfileError when nothing is left."""
    wanted = allowed(options, keyword)
    left = [a for a in wanted if a in ours]
    if not wanted:
        raise ProfileError(f"the ssh config for {label} leaves no {SPELLING[keyword]} at all",
                           f"fix {SPELLING[keyword]} for {label} in your ssh config; nothing was dialled")
    if not left:
        raise ProfileError(f"the ssh config for {label} allows only {SPELLING[keyword]} {','.join(wanted)[:200]}, "
                           "none of which devenv can use", f"add one of {', '.join(ours)} to {SPELLING[keyword]} "
                           f"for {label} (e.g. `{SPELLING[keyword]} +{ours[0]}`); nothing was dialled")
    return left


def key_accepted(options: Mapping[str, object], key_type: str) -> bool:
    """Whether ssh would offer a key (or certificate) of key_type under the hop's PubkeyAcceptedAlgorithms:
    an RSA key goes out as rsa-sha2-512/256 (or ssh-rsa where listed), the others under their own name."""
    accepted = allowed(options, "pubkeyacceptedalgorithms")
    cert = "-cert-v01@openssh.com" if key_type.endswith("-cert-v01@openssh.com") else ""
    base = key_type.removesuffix("-cert-v01@openssh.com")
    names = [f"{a}{cert}" for a in ("rsa-sha2-512", "rsa-sha2-256", "ssh-rsa")] if base == "ssh-rsa" else [key_type]
    return any(n in accepted for n in names)
