"""Ask the local OpenSSH client how it would reach a host: `ssh -G` prints the fully resolved configuration
(Include, Match, tokens in HostName, every default) without connecting.

The destination is validated and follows `--`, so a host name can never be read as an option; every value
we add (-l, -p, -i, -J, -o) is validated first by the caller (sshconfig.lookup_args).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from dataclasses import dataclass

from devenv.errors import ConnectError, ProfileError


@dataclass(frozen=True)
class Overrides:
    """Command-line-like settings applied before the config lookup (ssh's -l, -p, -i, -J, -o)."""
    user: str | None = None
    port: int | None = None
    identity_file: str | None = None
    jump: str | None = None
    hostname: str | None = None
    connect_timeout: float | None = None


# Options that may appear several times in `ssh -G` output; the others keep their single (first) value.
MULTI = frozenset({"identityfile", "certificatefile", "localforward", "remoteforward", "dynamicforward",
                   "sendenv", "setenv", "canonicaldomains"})
_TIMEOUT = 10.0
# An option table as `ssh -G` prints it (keys lower-case): a word or line, or the values of a repeated option.
SshOptions = dict[str, str | list[str]]


@functools.lru_cache(maxsize=1)
def _ssh_binary_cached(path_env: str) -> str | None:
    return shutil.which("ssh", path=path_env)


def ssh_binary() -> str | None:
    """The `ssh` client on PATH, unless DEVENV_NO_SSH_CLIENT=1 (forces the fallback parser)."""
    if os.environ.get("DEVENV_NO_SSH_CLIENT") == "1":
        return None
    return _ssh_binary_cached(os.environ.get("PATH", os.defpath))


def query(args: list[str], destination: str, config_file: str | None) -> SshOptions:
    """`ssh -G [-F config_file] ARGS -- destination` as {option: value or [values]} (keys lower-case)."""
    binary = ssh_binary()
    if binary is None:
        raise ConnectError("no ssh client found", "install OpenSSH's client (openssh-client)")
    argv = [binary, "-G"]
    if config_file is not None:
        argv += ["-F", config_file]
    argv += [*args, "--", destination]
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise ConnectError(f"`ssh -G {destination}` did not answer within {_TIMEOUT:g}s",
                           "a `Match exec` line in your ssh config may hang; check it") from None
    except OSError as e:
        raise ConnectError(f"cannot run {binary}: {e.strerror or e}", "check your OpenSSH client install") from None
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.strip().splitlines() if "Pseudo-terminal" not in ln]
        why = "; ".join(lines[-3:]) or f"exit code {proc.returncode}"
        raise ProfileError(f"OpenSSH cannot use its configuration for '{destination}': {why}",
                           "fix the ssh config line it names (`ssh -G HOST` shows the same error)")
    return parse_output(proc.stdout)


def parse_output(text: str) -> SshOptions:
    options: SshOptions = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        key = key.lower()
        if not key:
            continue
        if key in MULTI:
            values = options.setdefault(key, [])
            assert isinstance(values, list)
            values.append(value)
        else:
            options.setdefault(key, value)
    return options
