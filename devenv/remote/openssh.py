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

from devenv.config import paths, validate
from devenv.config.profiles import HostProfile
from devenv.errors import BadInput, DevenvError

_ALIAS_SAFE = re.compile(r"[^A-Za-z0-9._-]")
_KEY_TYPE = re.compile(r"(?:ssh|ecdsa|sk)-[A-Za-z0-9@.+-]{1,64}")
_BASE64 = re.compile(r"[A-Za-z0-9+/]{16,16384}={0,2}")


def host_options(host: HostProfile) -> list[str]:
    """Options, `--` and the destination for `ssh` to the host itself (append a command after it)."""
    options, destination = host_argv(host)
    return [*options, "--", destination]


def host_argv(host: HostProfile) -> tuple[list[str], str]:
    """(options, destination) for `ssh` to the host: every value checked, none can be read as an option."""
    if host.ssh is None:
        raise ValueError(f"host {host.name} is local: no ssh needed")
    target = host.ssh
    _check_target(host)
    argv: list[str] = []
    if os.environ.get("DEVENV_SSH_CONFIG"):
        # the config devenv reads in place of ~/.ssh/config; one not written yet is an empty one, as devenv
        # itself reads it (ssh would refuse a -F file that is not there)
        config = paths.ssh_config_path()
        argv += ["-F", str(config) if config.exists() else os.devnull]
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
    return argv, str(target.alias or target.hostname)


def _check_target(host: HostProfile) -> None:
    """The profile boundary checks these too; here they hold for every HostProfile, however it was made."""
    target = host.ssh
    assert target is not None
    checks = [("ssh.alias", target.alias, validate.alias_problem),
              ("ssh.hostname", target.hostname, validate.hostname_problem),
              ("ssh.user", target.user, validate.user_problem),
              ("ssh.identity_file", target.identity_file, validate.path_problem)]
    checks += [("ssh.proxy_jump", hop, validate.option_problem) for hop in target.proxy_jump]
    for where, value, problem_of in checks:
        problem = problem_of(value) if value is not None else None
        if problem is None and value is not None and where == "ssh.proxy_jump" and "," in value:
            problem = "holds ','"
        if problem:
            raise BadInput(f"{host.source}: field '{where}' {validate.preview(value)} {problem}",
                           "fix the host profile; nothing was run")
    if not (target.alias or target.hostname):
        raise BadInput(f"{host.source}: the host has neither ssh.alias nor ssh.hostname", "fix the host profile")


ENTRY_MARK = "  # devenv entry (alias: host's '-' kept, env's '-' doubled)"


def env_alias(host_name: str, env_name: str) -> str:
    """`devenv-HOST-ENV`, one alias per (host, env) pair: the env's `-` is written `--`, so the one single `-`
    after the host's last character ends the host (host `a` + env `b-c` is devenv-a-b--c, host `a-b` + env `c`
    is devenv-a-b-c). Characters an alias cannot hold (`user@box:22`), a `+`, capitals (ssh matches Host patterns
    ignoring case), a host's trailing `-` and an env's leading `-` are written `+XX` (hex). The usual names
    (lower case, env without `-`) read as they always did."""
    host = _alias_escape(host_name, "")
    host = host.rstrip("-") + "+2d" * (len(host) - len(host.rstrip("-")))
    env = _alias_escape(env_name, "--")
    if env.startswith("--"):
        env = "+2d" + env[2:]
    return f"devenv-{host or '+'}-{env or '+'}"


def legacy_env_alias(host_name: str, env_name: str) -> str:
    """The alias devenv wrote before it was made unambiguous (two pairs could share it)."""
    return _ALIAS_SAFE.sub("-", f"devenv-{host_name}-{env_name}")


def _alias_escape(text: str, dash: str) -> str:
    out = []
    for char in text:
        if char == "-":
            out.append(dash or "-")
        elif char.isascii() and (char.isdigit() or char.islower() or char in "._"):  # ssh matches Host
            out.append(char)                                                         # ignoring case
        else:
            out.extend(f"+{b:02x}" for b in char.encode())
    return "".join(out)


def known_hosts_line(alias: str, host_key: str) -> str:
    """A known_hosts line for the environment's sshd under its HostKeyAlias ("ssh-ed25519 AAAA...")."""
    parts = host_key.split()
    if len(parts) < 2 or not _KEY_TYPE.fullmatch(parts[0]) or not _BASE64.fullmatch(parts[1]):
        raise DevenvError(f"the environment's sshd host key for {alias} is not an OpenSSH public key",
                       "recreate the environment (devenv down, then devenv up)")
    return f"{_config_value(alias)} {parts[0]} {parts[1]}"


def env_config_entry(alias: str, host: HostProfile, port: int, identity_file: Path, known_hosts: Path,
                     ssh_binary: str = "ssh", user: str = "root") -> str:
    """An ssh_config block reaching the environment: through the host (ProxyCommand ssh -W) unless local;
    user: the environment's own (its sshd admits only it)."""
    if not 0 < int(port) < 65536:
        raise BadInput(f"port {port} of {alias} is not a TCP port", "recreate the environment")
    if validate.user_problem(user):
        raise BadInput(f"the environment's user {validate.preview(user)} {validate.user_problem(user)}",
                       "fix remoteUser / user: and recreate the environment")
    lines = [
        f"Host {_config_value(alias)}",
        ENTRY_MARK,
        "  HostName 127.0.0.1",
        f"  Port {int(port)}",
        f"  User {user}",
        f"  IdentityFile {_config_quote(str(identity_file))}",
        "  IdentitiesOnly yes",
        f"  HostKeyAlias {_config_value(alias)}",
        f"  UserKnownHostsFile {_config_quote(str(known_hosts))}",
        "  StrictHostKeyChecking yes",
        "  ServerAliveInterval 30",
    ]
    if not host.local:
        options, destination = host_argv(host)
        # ssh expands %-tokens in ProxyCommand: every value but the -W target has its '%' doubled.
        words = [_proxy_word(a) for a in [ssh_binary, *options]] + ["-W", "%h:%p", "--", _proxy_word(destination)]
        lines.append(f"  ProxyCommand {' '.join(words)}")
    return "\n".join(lines) + "\n"


def _proxy_word(value: str) -> str:
    problem = validate.text_problem(value)
    if problem:
        raise BadInput(f"a value for the ssh config {problem}: {validate.preview(value)}",
                       "fix the host profile (or the path) it came from")
    return shlex.quote(value).replace("%", "%%")


def replace_block(config_text: str, alias: str, block: str) -> str:
    """config_text with the `Host alias` block replaced by block (or block appended)."""
    text = _without_block(config_text, alias)
    return (text + "\n\n" if text else "") + block


def _without_block(config_text: str, alias: str) -> str:
    """config_text less the `Host alias` block (a block runs to the next Host or Match line), trailing newlines
    dropped."""
    out: list[str] = []
    skipping = False
    for line in config_text.splitlines(keepends=True):
        stripped = line.strip()
        if stripped.lower().startswith(("host ", "match ")):
            skipping = stripped.split()[1:] == [alias] and stripped.lower().startswith("host ")
        if not skipping:
            out.append(line)
    return "".join(out).rstrip("\n")


def block_of(config_text: str, alias: str) -> str | None:
    """The `Host alias` block of config_text (its Host line included), or None."""
    found: list[str] | None = None
    for line in config_text.splitlines(keepends=True):
        stripped = line.strip()
        if stripped.lower().startswith(("host ", "match ")):
            if found is not None:
                break
            if stripped.lower().startswith("host ") and stripped.split()[1:] == [alias]:
                found = []
        if found is not None:
            found.append(line)
    return "".join(found) if found is not None else None


def remove_block(config_text: str, alias: str) -> str:
    """config_text without the `Host alias` block."""
    text = _without_block(config_text, alias)
    return text + "\n" if text.strip() else ""


def remove_known_host(known_hosts_text: str, alias: str) -> str:
    kept = [ln for ln in known_hosts_text.splitlines() if ln.split(" ", 1)[0] != alias]
    return "\n".join(kept) + "\n" if kept else ""


def replace_known_host(known_hosts_text: str, alias: str, line: str) -> str:
    kept = [ln for ln in known_hosts_text.splitlines() if ln.split(" ", 1)[0] != alias]
    return "\n".join([*kept, line]) + "\n"


def _config_quote(value: str) -> str:
    """A path as one ssh_config argument: quoted when it has blanks; a quote or a control character is refused
    (ssh_config has no escape for them, and a newline would start a line of its own)."""
    value = _config_value(value, allow_blank=True)
    return f'"{value}"' if any(c in value for c in " \t#=") else value


def _config_value(value: str, allow_blank: bool = False) -> str:
    problem = validate.text_problem(value) or ('holds a double quote' if '"' in value else None)
    if problem is None and not allow_blank and (not value or any(c in value for c in ' \t#="\'')):
        problem = "holds a blank, '#', '=' or a quote"
    if problem:
        raise BadInput(f"a value for devenv's ssh config {problem}: {validate.preview(value)}",
                       "fix the profile, path or environment variable it came from; nothing was written")
    return value
