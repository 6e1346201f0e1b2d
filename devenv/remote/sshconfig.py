"""Resolve a profile's SSHTarget against the ssh config file, the way OpenSSH would.

Lookup key is the alias (else the hostname), as with `ssh NAME`. Explicit profile fields win over the config
file, like `ssh -p`/`-l`/`-J` on a command line; the profile's identity_file is tried before the config's
IdentityFile entries, like `ssh -i`. ProxyJump hops are resolved each with its own config section; as with
OpenSSH, only the first hop's own ProxyJump is followed (the later hops are reached through the earlier ones).
"""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass, replace
from pathlib import Path

import paramiko

from devenv.config import paths
from devenv.errors import ConnectError

DEFAULT_CONNECT_TIMEOUT = 15.0   # OpenSSH waits for the OS's TCP timeout (minutes); we prefer a clear error
DEFAULT_ALIVE_INTERVAL = 30.0
# OpenSSH's default identities, in its order, restricted to the key types paramiko supports.
DEFAULT_IDENTITIES = ("~/.ssh/id_rsa", "~/.ssh/id_ecdsa", "~/.ssh/id_ed25519")
_MAX_JUMP_DEPTH = 8


@dataclass(frozen=True)
class ResolvedTarget:
    label: str                       # what the user called it (alias or host spec), for messages
    hostname: str
    port: int
    user: str
    identity_files: tuple[str, ...]  # expanded paths; empty = OpenSSH's defaults
    identities_only: bool
    connect_timeout: float
    server_alive_interval: float
    server_alive_count_max: int = 3
    jumps: tuple[ResolvedTarget, ...] = ()   # hops in dialling order, flattened
    proxy_command: str | None = None

    @property
    def address(self) -> str:
        host = f"[{self.hostname}]" if ":" in self.hostname else self.hostname
        return f"{host}:{self.port}"

    def describe(self) -> str:
        return f"{self.user}@{self.address}"


def load_config(path: Path | None = None) -> paramiko.SSHConfig:
    path = path or paths.ssh_config_path()
    if not path.is_file():
        return paramiko.SSHConfig()
    try:
        return paramiko.SSHConfig.from_path(str(path))
    except Exception as e:  # paramiko raises several types for a malformed file
        raise ConnectError(f"cannot read ssh config {path}: {e}",
                           "fix the line it names (see `man ssh_config`)") from None


def resolve(target, config: paramiko.SSHConfig | None = None) -> ResolvedTarget:
    """target: a devenv.config.profiles.SSHTarget (duck-typed so this module stays free of L0 cycles)."""
    config = config if config is not None else load_config()
    name = target.alias or target.hostname
    if not name:
        raise ConnectError("the host profile's ssh section names neither an alias nor a hostname",
                           "set ssh.hostname (or ssh.alias for a Host in ~/.ssh/config) in the profile")
    hops = tuple(target.proxy_jump or ())
    resolved = _resolve_name(
        name, config, depth=0,
        hostname=target.hostname if target.alias else None,
        user=target.user, port=target.port, identity_file=target.identity_file,
        proxy_jump=hops or None, connect_timeout=target.connect_timeout,
    )
    if target.identity_file:
        # Unlike `ssh -i`, the profile's key also serves jump hosts that configure none of their own: a
        # profile's proxy_jump hops ("user@host:port") have no other place to name a key.
        own = resolved.identity_files[:1]
        resolved = replace(resolved, jumps=tuple(j if j.identity_files else replace(j, identity_files=own)
                                                 for j in resolved.jumps))
    return resolved


def parse_hop(spec: str) -> tuple[str | None, str, int | None]:
    """'user@host:port', 'host', '[::1]:22' or 'ssh://user@host:port' -> (user, host, port)."""
    text = spec.strip()
    if text.startswith("ssh://"):
        text = text[len("ssh://"):]
    user = None
    if "@" in text:
        user, text = text.rsplit("@", 1)
    port = None
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        if rest.startswith(":"):
            port = _port(rest[1:], spec)
    elif text.count(":") == 1:
        host, port_text = text.split(":")
        port = _port(port_text, spec)
    else:
        host = text
    if not host:
        raise ConnectError(f"bad ProxyJump hop '{spec}'", "write hops as user@host:port or an ssh config alias")
    return user, host, port


def _resolve_name(name, config, *, depth, hostname=None, user=None, port=None, identity_file=None,
                  proxy_jump=None, connect_timeout=None, label=None) -> ResolvedTarget:
    if depth > _MAX_JUMP_DEPTH:
        raise ConnectError(f"ProxyJump chain for '{name}' is deeper than {_MAX_JUMP_DEPTH} hops (a loop?)",
                           "check the ProxyJump lines in your ssh config")
    try:
        entry = config.lookup(name)
    except Exception as e:
        raise ConnectError(f"cannot apply ssh config to '{name}': {e}", "fix that Host/Match section") from None
    identities = [os.path.expanduser(identity_file)] if identity_file else []
    identities += [os.path.expanduser(p) for p in entry.get("identityfile", []) if p not in identities]
    if proxy_jump is None:
        configured = entry.get("proxyjump", "")
        proxy_jump = tuple(h.strip() for h in configured.split(",") if h.strip())
    if proxy_jump and proxy_jump[0].lower() == "none":
        proxy_jump = ()
    proxy_command = entry.get("proxycommand")
    resolved = ResolvedTarget(
        label=label or name,
        hostname=hostname or entry.get("hostname", name),
        port=port or _port(entry.get("port", "22"), f"Port for {name}"),
        user=user or entry.get("user") or getpass.getuser(),
        identity_files=tuple(identities),
        identities_only=entry.get("identitiesonly", "no").lower() == "yes",
        connect_timeout=float(connect_timeout or _seconds(entry.get("connecttimeout"), DEFAULT_CONNECT_TIMEOUT)),
        server_alive_interval=_seconds(entry.get("serveraliveinterval"), DEFAULT_ALIVE_INTERVAL),
        server_alive_count_max=int(_seconds(entry.get("serveralivecountmax"), 3)),
        proxy_command=None if not proxy_command or proxy_command.lower() == "none" or proxy_jump else proxy_command,
    )
    return replace(resolved, jumps=_resolve_jumps(proxy_jump, config, depth))


def _resolve_jumps(hops: tuple[str, ...], config, depth) -> tuple[ResolvedTarget, ...]:
    chain: list[ResolvedTarget] = []
    for i, spec in enumerate(hops):
        user, host, port = parse_hop(spec)
        hop = _resolve_name(host, config, depth=depth + 1, user=user, port=port, label=spec,
                            # only the first hop follows its own ProxyJump (OpenSSH's -J semantics)
                            proxy_jump=None if i == 0 else ())
        chain.extend(hop.jumps)
        chain.append(replace(hop, jumps=()))
    return tuple(chain)


def _port(text: str, what: str) -> int:
    if not str(text).isdigit() or not 0 < int(text) < 65536:
        raise ConnectError(f"bad port '{text}' in {what}", "a port is a number from 1 to 65535")
    return int(text)


def _seconds(text: str | None, default: float) -> float:
    try:
        value = float(text) if text else default
    except ValueError:
        return default
    return value if value > 0 else default
