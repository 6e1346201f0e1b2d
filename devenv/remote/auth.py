"""Public-key authentication in OpenSSH's order: ssh-agent keys, then IdentityFile keys (or ~/.ssh/id_*).

IdentitiesOnly keeps agent keys to those matching a configured identity (by its .pub or its private half).
An encrypted key is unlocked by the agent if it holds it; otherwise we ask for its passphrase when stdin is a
terminal, and say how to load it into ssh-agent when it is not. Passwords are never tried: devenv is key-only.
"""

from __future__ import annotations

import getpass
import os
import sys
from pathlib import Path

import paramiko

from devenv.errors import ConnectError
from devenv.remote.hostkeys import short_type
from devenv.remote.sshconfig import DEFAULT_IDENTITIES, ResolvedTarget


def authenticate(transport: paramiko.Transport, target: ResolvedTarget) -> None:
    """Authenticate transport as target.user or raise one ConnectError saying what was tried."""
    attempt = _Attempt(transport, target)
    agent = _open_agent()
    try:
        paths = _identity_paths(target, attempt)
        publics = {p: _public_blob(p) for p in paths}
        for key in agent.get_keys() if agent else ():
            if target.identities_only and key.asbytes() not in publics.values():
                continue
            if attempt.offer(key, f"agent key {short_type(key.get_name())} {key.fingerprint}"):
                return
        for path in paths:
            if publics[path] is not None and publics[path] in attempt.offered:
                continue  # the agent already offered this key
            key = attempt.load(path)
            if (key is not None and key.asbytes() not in attempt.offered
                    and attempt.offer(key, f"{path} ({short_type(key.get_name())} {key.fingerprint})")):
                return
        raise attempt.failure(agent_present=agent is not None, paths=paths)
    finally:
        if agent:
            agent.close()


class _Attempt:
    """What we offered and why keys were skipped, for one clear error at the end."""

    def __init__(self, transport: paramiko.Transport, target: ResolvedTarget):
        self.transport, self.target = transport, target
        self.offered: set[bytes] = set()
        self.tried: list[str] = []
        self.encrypted: list[Path] = []
        self.problems: list[str] = []

    def offer(self, key: paramiko.PKey, description: str) -> bool:
        self.offered.add(key.asbytes())
        self.tried.append(description)
        try:
            remaining = self.transport.auth_publickey(self.target.user, key)
        except paramiko.BadAuthenticationType as e:
            raise ConnectError(
                f"{self.target.describe()} does not accept SSH keys (it allows: {', '.join(e.allowed_types)})",
                "devenv logs in with keys only; ask the host's admin to enable PubkeyAuthentication") from None
        except paramiko.AuthenticationException:
            return False
        except (paramiko.SSHException, EOFError, OSError):
            if self.transport.is_active():
                return False  # e.g. the agent could not sign; try the next key
            raise ConnectError(
                f"{self.target.describe()} closed the connection during authentication after "
                f"{len(self.tried)} key(s) (too many authentication failures?)",
                "set IdentitiesOnly yes and IdentityFile to the right key for this host in ~/.ssh/config, "
                "or set ssh.identity_file in the profile") from None
        if remaining:
            raise ConnectError(
                f"{self.target.describe()} accepted the key but wants another factor ({', '.join(remaining)})",
                "devenv supports key-only logins; use a host or account without a second factor")
        return True

    def load(self, path: Path) -> paramiko.PKey | None:
        try:
            return paramiko.PKey.from_path(str(path))
        except TypeError as e:  # cryptography's way of saying "encrypted, no passphrase given"
            if "password" not in str(e).lower():
                self.problems.append(f"cannot use key {path}: {e}")
                return None
        except FileNotFoundError:
            return None
        except (paramiko.SSHException, paramiko.UnknownKeyType, ValueError, OSError) as e:
            self.problems.append(f"cannot use key {path}: {e}")
            return None
        if not _can_prompt():
            self.encrypted.append(path)
            return None
        for _ in range(3):  # as ssh does
            passphrase = getpass.getpass(f"Enter passphrase for key '{path}': ")
            if not passphrase:
                return None
            try:
                return paramiko.PKey.from_path(str(path), passphrase.encode())
            except (paramiko.SSHException, ValueError, TypeError):
                print("Bad passphrase, try again.", file=sys.stderr)
        self.problems.append(f"wrong passphrase for {path}")
        return None

    def failure(self, *, agent_present: bool, paths: list[Path]) -> ConnectError:
        who = f"authentication to {self.target.describe()} ({self.target.label}) failed"
        notes = "; ".join(self.problems)
        if self.encrypted and not self.tried:
            key = self.encrypted[0]
            return ConnectError(
                f"{who}: key {key} is encrypted and its passphrase cannot be asked (stdin is not a terminal)"
                + (f"; {notes}" if notes else ""),
                f"load it into ssh-agent once: `eval $(ssh-agent) && ssh-add {key}`, then re-run "
                "(or run devenv from a terminal to be asked for the passphrase)")
        if not self.tried:
            agent = "ssh-agent has no usable key" if agent_present else "no ssh-agent (SSH_AUTH_SOCK is unset)"
            looked = ", ".join(str(p) for p in paths) or ", ".join(DEFAULT_IDENTITIES)
            return ConnectError(
                f"{who}: no key to offer ({agent}; no usable key file among {looked})"
                + (f"; {notes}" if notes else ""),
                "create a key with `ssh-keygen -t ed25519`, install it with `ssh-copy-id`, and set "
                "ssh.identity_file in the profile (or IdentityFile in ~/.ssh/config)")
        skipped = f"; skipped encrypted {', '.join(map(str, self.encrypted))} (no terminal)" if self.encrypted else ""
        t = self.target
        return ConnectError(
            f"{who}: the server refused every key offered: {', '.join(self.tried)}{skipped}"
            + (f"; {notes}" if notes else ""),
            f"authorize your public key on the host (`ssh-copy-id -i KEY.pub -p {t.port} {t.user}@{t.hostname}`), "
            "point IdentityFile / ssh.identity_file at a key the host accepts, or load it into ssh-agent "
            "(`ssh-add KEY`)")


def _identity_paths(target: ResolvedTarget, attempt: _Attempt) -> list[Path]:
    if target.identity_files:
        paths = [Path(p) for p in target.identity_files]
        for p in paths:
            if not p.exists():
                attempt.problems.append(f"identity file {p} does not exist")
        return [p for p in paths if p.exists()]
    return [p for p in (Path(os.path.expanduser(d)) for d in DEFAULT_IDENTITIES) if p.exists()]


def _public_blob(path: Path) -> bytes | None:
    """The key blob from KEY.pub (readable without the passphrase), else from an unencrypted KEY, else None."""
    try:
        fields = path.with_name(path.name + ".pub").read_text().split()
        return paramiko.PublicBlob.from_string(" ".join(fields[:2])).key_blob
    except (OSError, ValueError, IndexError):
        pass
    try:
        return paramiko.PKey.from_path(str(path)).asbytes()
    except Exception:  # encrypted, unreadable or not a key: it simply matches no agent key
        return None


def _open_agent() -> paramiko.Agent | None:
    if not os.environ.get("SSH_AUTH_SOCK"):
        return None
    try:
        agent = paramiko.Agent()
    except paramiko.SSHException:
        return None  # a dead or foreign socket: OpenSSH ignores it too
    return agent


def _can_prompt() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (ValueError, AttributeError):
        return False
