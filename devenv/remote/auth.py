"""Public-key authentication in OpenSSH's order: ssh-agent keys, then IdentityFile keys (or ~/.ssh/id_*).

The agent is the one IdentityAgent names (`none`: no agent; unset: $SSH_AUTH_SOCK). IdentitiesOnly keeps agent
keys to those matching a configured identity, known by its .pub, by the public half an OpenSSH-format key
stores unencrypted, or by the IdentityFile itself when it is a `.pub` whose private half lives only in the
agent. A key with a certificate (CertificateFile, or KEY-cert.pub beside it) is offered with it first.
An encrypted key is unlocked by the agent if it holds it; otherwise we ask for its passphrase when stdin is a
terminal, and say how to load it into ssh-agent when it is not. Passwords are never tried: devenv is key-only.
"""

from __future__ import annotations

import base64
import getpass
import os
import socket
import sys
from pathlib import Path

from devenv.errors import BadInput, ConnectError
from devenv.remote.hostkeys import short_type
from devenv.remote.sshconfig import DEFAULT_IDENTITIES, ResolvedTarget, local_home
from devenv.remote.sshlib import paramiko


def authenticate(transport: paramiko.Transport, target: ResolvedTarget) -> None:
    """Authenticate transport as target.user or raise one ConnectError saying what was tried."""
    attempt = _Attempt(transport, target)
    agent = _open_agent(getattr(target, "identity_agent", None))
    try:
        paths = _identity_paths(target, attempt)
        publics = {p: _public_blob(p) for p in paths}
        certs = _certificates(target, paths)
        for key in agent.get_keys() if agent else ():
            if target.identities_only and key.asbytes() not in publics.values():
                continue
            for cert in certs.get(key.asbytes(), ()):
                with_cert = paramiko.AgentKey(key.agent, key.asbytes())
                if _with_cert(with_cert, cert) and attempt.offer(
                        with_cert, f"agent key {short_type(key.get_name())} {key.fingerprint} with certificate"):
                    return
            if attempt.offer(key, f"agent key {short_type(key.get_name())} {key.fingerprint}"):
                return
        for path in paths:
            if publics[path] is not None and publics[path] in attempt.offered:
                continue  # the agent already offered this key
            if _is_public_only(path):
                continue  # a .pub names an agent key; there is no private half to load
            loaded = attempt.load(path)
            if loaded is None or loaded.asbytes() in attempt.offered:
                continue
            for cert in certs.get(loaded.asbytes(), ()):
                if _with_cert(loaded, cert) and attempt.offer(loaded, f"{path} with certificate {cert.key_type}"):
                    return
            loaded.public_blob = None  # then the plain key, as ssh does after its certificate
            if attempt.offer(loaded, f"{path} ({short_type(loaded.get_name())} {loaded.fingerprint})"):
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
        from devenv.remote import algorithms

        blob = getattr(key, "public_blob", None)
        key_type = blob.key_type if blob is not None else key.get_name()
        if not algorithms.key_accepted(getattr(self.target, "options", None) or {}, key_type):
            self.problems.append(f"{description} not offered: PubkeyAcceptedAlgorithms does not list {key_type}")
            return False                      # as ssh, which never offers it
        self.offered.add(key.asbytes())
        self.tried.append(description)
        try:
            remaining = self.transport.auth_publickey(self.target.user, key)
        except paramiko.BadAuthenticationType as e:
            raise ConnectError(
                f"{self.target.describe()} does not accept SSH keys (it allows: {', '.join(e.allowed_types)})",
                "devenv logs in with keys only; ask the host's admin to enable PubkeyAuthentication") from None
        except paramiko.AuthenticationException as e:
            if self.transport.is_active() and "timeout" not in str(e).lower():
                return False
            raise ConnectError(
                f"{self.target.describe()} ({self.target.label}) did not answer authentication within "
                f"{self.transport.auth_timeout:g}s", "the host or the link is very slow or hung; try again, "
                "or raise ConnectTimeout") from None
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
        except (paramiko.SSHException, paramiko.pkey.UnknownKeyType, ValueError, OSError) as e:
            self.problems.append(f"cannot use key {path}: {e}")
            return None
        if not _can_prompt() or _batch_mode(self.target):
            self.encrypted.append(path)
            return None
        for _ in range(3):  # as ssh does
            passphrase = getpass.getpass(f"Enter passphrase for key '{path}': ")
            if not passphrase:
                return None
            try:
                # bytes: cryptography's loaders take nothing else (paramiko's annotation says str)
                return paramiko.PKey.from_path(str(path), passphrase.encode())  # type: ignore[arg-type]
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
                f"{who}: key {key} is encrypted and its passphrase cannot be asked "
                f"({'BatchMode yes' if _batch_mode(self.target) else 'stdin is not a terminal'})"
                + (f"; {notes}" if notes else ""),
                f"load it into ssh-agent once: `eval $(ssh-agent) && ssh-add {key}`, then re-run "
                "(or run devenv from a terminal to be asked for the passphrase)")
        if not self.tried:
            if agent_present:
                agent = "ssh-agent has no usable key"
            elif getattr(self.target, "identity_agent", None) == "none":
                agent = "IdentityAgent none"
            else:
                agent = "no ssh-agent (SSH_AUTH_SOCK is unset or dead)"
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
        for p in paths:  # a FIFO would block the read forever, /dev/zero would fill the memory
            for file in (p, _pub_of(p)):
                if file.exists() and not file.is_file():
                    raise BadInput(f"identity file {file} is not a regular file (a FIFO, a device or a folder)",
                                   "point ssh.identity_file / IdentityFile at the private key file itself")
        usable = [p for p in paths if p.exists() or _pub_of(p).exists()]
        for p in paths:
            if p not in usable:
                attempt.problems.append(f"identity file {p} does not exist")
        return usable
    home = local_home()  # the passwd home, as ssh takes it
    return [p for p in (Path(home) / d.removeprefix("~/") for d in DEFAULT_IDENTITIES) if p.is_file()]


def _pub_of(path: Path) -> Path:
    return path.with_name(path.name + ".pub")


def _is_public_only(path: Path) -> bool:
    """An IdentityFile that is a public key (KEY.pub named directly, or KEY missing beside its KEY.pub)."""
    if not path.exists():
        return True
    try:
        head = path.read_bytes()[:64]
    except OSError:
        return False
    return not head.startswith(b"-----BEGIN") and head.split(b" ", 1)[0].startswith((b"ssh-", b"ecdsa-"))


def _public_blob(path: Path) -> bytes | None:
    """The key blob without any passphrase: from KEY.pub (or KEY itself when it is a .pub), from the public
    half an OpenSSH-format private key stores in clear, else from an unencrypted KEY; None if none works."""
    for candidate in (path, _pub_of(path)):
        try:
            fields = candidate.read_text().split()
            return paramiko.pkey.PublicBlob.from_string(" ".join(fields[:2])).key_blob
        except (OSError, ValueError, IndexError, UnicodeDecodeError):
            continue
    blob = _openssh_private_public_half(path)
    if blob is not None:
        return blob
    try:
        return paramiko.PKey.from_path(str(path)).asbytes()
    except Exception:  # encrypted, unreadable or not a key: it simply matches no agent key
        return None


def _openssh_private_public_half(path: Path) -> bytes | None:
    """'openssh-key-v1' files keep the public key outside the encrypted part (PROTOCOL.key)."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError):
        return None
    begin, end = "-----BEGIN OPENSSH PRIVATE KEY-----", "-----END OPENSSH PRIVATE KEY-----"
    if begin not in text or end not in text:
        return None
    try:
        data = base64.b64decode("".join(text.split(begin, 1)[1].split(end, 1)[0].split()))
        magic = b"openssh-key-v1\0"
        if not data.startswith(magic):
            return None
        m = paramiko.Message(data[len(magic):])
        m.get_string(), m.get_string(), m.get_string()  # cipher, kdf, kdf options
        if m.get_int() < 1:
            return None
        return m.get_binary()
    except Exception:
        return None


def _certificates(target: ResolvedTarget, paths: list[Path]) -> dict[bytes, list[paramiko.pkey.PublicBlob]]:
    """Certificates by the blob of the key they certify: CertificateFile entries, then KEY-cert.pub files."""
    found: dict[bytes, list[paramiko.pkey.PublicBlob]] = {}
    files = [Path(p) for p in getattr(target, "certificate_files", ())]
    files += [p.with_name(p.name.removesuffix(".pub") + "-cert.pub") for p in paths]
    for file in dict.fromkeys(files):
        if not file.is_file():  # missing, or a FIFO or device that a read would hang on
            continue
        try:
            cert = paramiko.pkey.PublicBlob.from_file(str(file))
        except (OSError, ValueError, IndexError, UnicodeDecodeError):
            continue
        if not cert.key_type.endswith("-cert-v01@openssh.com"):
            continue
        try:
            m = paramiko.Message(cert.key_blob)
            m.get_text(), m.get_string()  # type, nonce
            key_type = cert.key_type.replace("-cert-v01@openssh.com", "")
            plain = paramiko.Message()
            plain.add_string(key_type)
            if key_type == "ssh-ed25519":
                plain.add_string(m.get_binary())
            elif key_type.startswith("ecdsa"):
                plain.add_string(m.get_binary())
                plain.add_string(m.get_binary())
            else:
                e, n = m.get_mpint(), m.get_mpint()
                plain.add_mpint(e)
                plain.add_mpint(n)
        except Exception:
            continue
        found.setdefault(plain.asbytes(), []).append(cert)
    return found


def _with_cert(key: paramiko.PKey, cert: paramiko.pkey.PublicBlob) -> bool:
    try:
        key.load_certificate(f"{cert.key_type} {base64.b64encode(cert.key_blob).decode()}")
    except (ValueError, paramiko.SSHException):
        return False
    return True


def _open_agent(identity_agent: str | None = None) -> _SocketAgent | None:
    if identity_agent == "none":
        return None
    path = identity_agent or os.environ.get("SSH_AUTH_SOCK")
    if not path:
        return None
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(10)
        sock.connect(path)
    except OSError:
        return None  # a dead or missing socket: OpenSSH goes on without an agent too
    agent = _SocketAgent()
    try:
        agent.connect(sock)
    except paramiko.SSHException:
        sock.close()
        return None
    return agent


class _SocketAgent(paramiko.agent.AgentSSH):
    """paramiko's agent client on a socket we opened (paramiko.Agent only reads $SSH_AUTH_SOCK)."""

    # AgentSSH's own connect and close (private, so its stubs leave them out) are what paramiko.Agent calls
    def connect(self, sock: socket.socket) -> None:
        self._connect(sock)  # type: ignore[attr-defined]

    def close(self) -> None:
        self._close()  # type: ignore[attr-defined]


def _batch_mode(target: ResolvedTarget) -> bool:
    """BatchMode yes: ssh never asks anything, not even on a terminal."""
    return str(getattr(target, "options", {}).get("batchmode", "no")).lower() in ("yes", "true")


def _can_prompt() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (ValueError, AttributeError):
        return False
