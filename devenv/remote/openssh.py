"""OpenSSH command lines and config entries for hosts and environments (L0: text only, nothing runs here).

The user's own `ssh` reaches a host exactly as devenv's connection does: the profile's alias through the same
ssh config file (-F only when $DEVENV_SSH_CONFIG points elsewhere), or hostname/user/port/identity/ProxyJump
from the profile, and the same known_hosts with strict checking (devenv's connection already verified the key).
An environment is reached through its host like ProxyJump (`ssh -W` as the ProxyCommand), with its own pinned
host key under a HostKeyAlias, and only devenv's key.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

from devenv.config import paths
from devenv.config.profiles import HostProfile

_ALIAS_SAFE = re.compile(r"[^A-Za-z0-9._-]")


def host_options(host: HostProfile) -> list[str]:
    """Options and destination for `ssh` to the host itself (append -W, -L, -N or a command)."""
    if host.ssh is None:
        raise ValueError(f"host {host.name} is local: no ssh needed")
    target = host.ssh
    argv: list[str] = []
    if os.environ.get("DEVENV_SSH_CONFIG"):
        argv += ["-F", str(paths.ssh_config_path())]
    if os.environ.get("DEVENV_KNOWN_HOSTS"):
        argv += ["-o", f"UserKnownHostsFile={paths.known_hosts_path()}"]
    argv += ["-o", "StrictHostKeyChecking=yes"]
    if target.connect_timeout:
        argv += ["-o", f"ConnectTimeout={int(target.connect_timeout)}"]
    if target.user:
        argv += ["-l", target.user]
    if target.port:
        argv += ["-p", str(target.port)]
    if target.identity_file:
        argv += ["-i", str(Path(target.identity_file).expanduser())]
    if target.proxy_jump:
        argv += ["-J", ",".join(target.proxy_jump)]
    argv.append(target.alias or target.hostname)
    return argv


def env_alias(host_name: str, env_name: str) -> str:
    return _ALIAS_SAFE.sub("-", f"devenv-{host_name}-{env_name}")


def known_hosts_line(alias: str, host_key: str) -> str:
    """A known_hosts line for the environment's sshd under its HostKeyAlias ("ssh-ed25519 AAAA...")."""
    key_type, blob = host_key.split()[:2]
    return f"{alias} {key_type} {blob}"


def env_config_entry(alias: str, host: HostProfile, port: int, identity_file: Path, known_hosts: Path,
                     ssh_binary: str = "ssh") -> str:
    """An ssh_config block reaching the environment: through the host (ProxyCommand ssh -W) unless local."""
    lines = [
        f"Host {alias}",
        "  HostName 127.0.0.1",
        f"  Port {port}",
        "  User root",
        f"  IdentityFile {_config_quote(str(identity_file))}",
        "  IdentitiesOnly yes",
        f"  HostKeyAlias {alias}",
        f"  UserKnownHostsFile {_config_quote(str(known_hosts))}",
        "  StrictHostKeyChecking yes",
        "  ServerAliveInterval 30",
    ]
    if not host.local:
        proxy = " ".join(shlex.quote(a) for a in [ssh_binary, *host_options(host)[:-1], "-W", "%h:%p",
                                                   host_options(host)[-1]])
        lines.append(f"  ProxyCommand {proxy}")
    return "\n".join(lines) + "\n"


def replace_block(config_text: str, alias: str, block: str) -> str:
    """config_text with the `Host alias` block replaced by block (or block appended)."""
    out: list[str] = []
    skipping = False
    for line in config_text.splitlines(keepends=True):
        stripped = line.strip()
        if stripped.lower().startswith(("host ", "match ")):
            skipping = stripped.split()[1:] == [alias] and stripped.lower().startswith("host ")
        if not skipping:
            out.append(line)
    text = "".join(out).rstrip("\n")
    return (text + "\n\n" if text else "") + block


def replace_known_host(known_hosts_text: str, alias: str, line: str) -> str:
    kept = [ln for ln in known_hosts_text.splitlines() if ln.split(" ", 1)[0] != alias]
    return "\n".join([*kept, line]) + "\n"


def _config_quote(value: str) -> str:
    return f'"{value}"' if " " in value else value
