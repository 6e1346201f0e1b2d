"""The environment's entry in devenv's own ssh config (L2): written by `up` and `ssh`, used by OpenSSH.

The entry (config dir's ssh/config) reaches the environment through its host like ProxyJump, pins the
environment's own host key (ssh/known_hosts, under a HostKeyAlias) and offers only devenv's key.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from devenv.config import paths
from devenv.config.profiles import HostProfile
from devenv.remote import openssh


def ssh_files() -> tuple[Path, Path]:
    """(devenv's ssh config, its known_hosts)."""
    base = paths.config_dir() / "ssh"
    return base / "config", base / "known_hosts"


def entry_text(host: HostProfile, env_name: str, port: int, identity_file: Path, user: str = "root"
               ) -> tuple[str, str]:
    """(the environment's alias, its config block); user: the one the environment's sshd admits."""
    alias = openssh.env_alias(host.name, env_name)
    block = openssh.env_config_entry(alias, host, port, identity_file, ssh_files()[1], shutil.which("ssh") or "ssh",
                                     user)
    return alias, block


def write_env_entry(host: HostProfile, env_name: str, port: int, host_key: str, identity_file: Path,
                    user: str = "root") -> str:
    """Write (or refresh) the environment's block and pinned key; returns its alias.

    An entry written under the old alias (`devenv-HOST-ENV` with the env's `-` single, which two pairs could
    share) is removed as this one is written: it carries no entry mark, so it may be this pair's or the other's,
    and either way it could lead to the wrong environment. An entry with the mark under that name is another
    pair's current one and stays."""
    config, known_hosts = ssh_files()
    alias, block = entry_text(host, env_name, port, identity_file, user)
    old_config = config.read_text() if config.is_file() else ""
    old_known = known_hosts.read_text() if known_hosts.is_file() else ""
    legacy = openssh.legacy_env_alias(host.name, env_name)
    if legacy != alias:
        old_block = openssh.block_of(old_config, legacy)
        if old_block is not None and openssh.ENTRY_MARK not in old_block.splitlines():
            old_config = openssh.remove_block(old_config, legacy)
            old_known = openssh.remove_known_host(old_known, legacy)
    pinned = openssh.known_hosts_line(alias, host_key)
    paths.write_private(known_hosts, openssh.replace_known_host(old_known, alias, pinned))
    paths.write_private(config, openssh.replace_block(old_config, alias, block))
    return alias


def remove_env_entry(host: HostProfile, env_name: str) -> bool:
    """The environment's block and pinned key gone from devenv's ssh files (`down`: what it led to is gone,
    and the next `up` writes it again); whether there was one."""
    config, known_hosts = ssh_files()
    alias = openssh.env_alias(host.name, env_name)
    old_config = config.read_text() if config.is_file() else ""
    if openssh.block_of(old_config, alias) is None:
        return False
    paths.write_private(config, openssh.remove_block(old_config, alias))
    if known_hosts.is_file():
        paths.write_private(known_hosts, openssh.remove_known_host(known_hosts.read_text(), alias))
    return True
