"""Host-key checking as OpenSSH does it, with devenv's stricter policy:

- a key marked @revoked (or listed in RevokedHostKeys) is always refused;
- a known, matching key (or a host certificate signed by a matching @cert-authority) is accepted;
- a key that differs from the known one is always refused (even with StrictHostKeyChecking no);
- an unknown key is refused unless --accept-new-host, or the user's own config says
  StrictHostKeyChecking accept-new for that host (their explicit consent); then it is recorded in the first
  UserKnownHostsFile, as ssh does.

Reads OpenSSH's known_hosts format itself (plain, wildcard and hashed `|1|salt|hash` names, `[host]:port`
for non-22 ports, @revoked and @cert-authority markers) from every UserKnownHostsFile and
GlobalKnownHostsFile, so one malformed line never hides the others. Host names are compared lower-cased, as
ssh does (hashed entries included). HostKeyAlias replaces the host name (and port) in every lookup.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from devenv.config import paths
from devenv.errors import HostKeyError
from devenv.remote.known_hosts_lines import KnownKey as KnownKey  # re-exported: hostkeys' own API
from devenv.remote.known_hosts_lines import entries_for as entries_for
from devenv.remote.known_hosts_lines import fingerprint as fingerprint
from devenv.remote.sshconfig import ResolvedTarget
from devenv.remote.sshlib import paramiko

_write_lock = threading.Lock()
_KRL_MAGIC = b"SSHKRL\n\0"


def entry_name(hostname: str, port: int) -> str:
    hostname = hostname.lower()
    return hostname if port == 22 else f"[{hostname}]:{port}"


def short_type(key_type: str) -> str:
    """'ssh-ed25519' -> 'ED25519', as `ssh` prints it."""
    if key_type.startswith("ecdsa"):
        return "ECDSA"
    return key_type.removeprefix("ssh-").replace("-cert-v01@openssh.com", "-CERT").upper()


def lookup_name(hop: ResolvedTarget) -> str:
    """The known_hosts name for a hop: its HostKeyAlias as is, else [host]:port (lower-cased)."""
    return hop.host_key_alias or entry_name(hop.hostname, hop.port)


def user_files(hop: ResolvedTarget) -> list[Path]:
    """The hop's UserKnownHostsFile list as resolved ([] for `UserKnownHostsFile none`); a hop that names
    none (no ResolvedTarget) gets devenv's default file."""
    listed = getattr(hop, "known_hosts_files", None)
    return [paths.known_hosts_path()] if listed is None else [Path(p) for p in listed]


def hop_files(hop: ResolvedTarget) -> list[Path]:
    return user_files(hop) + [Path(p) for p in getattr(hop, "global_known_hosts_files", ())]


def known_keys(hostname: str, port: int, path: Path | None = None, *, name: str | None = None,
               files: list[Path] | None = None) -> list[KnownKey]:
    """Every entry (plain, @revoked, @cert-authority) whose host pattern matches."""
    name = name or entry_name(hostname, port)
    found = []
    for file in files or [path or paths.known_hosts_path()]:
        if not file.is_file():  # missing, or /dev/null (a common "keep nothing"), a FIFO, a device: no entries
            continue
        try:
            lines = file.read_text(errors="replace").splitlines()
        except (FileNotFoundError, NotADirectoryError, PermissionError, IsADirectoryError):
            continue
        found += entries_for(name, lines, str(file))
    return found


def preferred_key_types(known: list[KnownKey]) -> list[str]:
    """Host-key algorithms to ask for first, so a host with several keys shows the one we know (as ssh does);
    with a matching @cert-authority, certificates first."""
    names = []
    if any(k.ca and not k.revoked for k in known):
        names += ["ssh-ed25519-cert-v01@openssh.com", "ecdsa-sha2-nistp256-cert-v01@openssh.com",
                  "ecdsa-sha2-nistp384-cert-v01@openssh.com", "ecdsa-sha2-nistp521-cert-v01@openssh.com",
                  "rsa-sha2-512-cert-v01@openssh.com", "rsa-sha2-256-cert-v01@openssh.com"]
    for k in known:
        if k.ca or k.revoked:
            continue
        if k.key_type == "ssh-rsa":
            names += ["rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"]
        else:
            names.append(k.key_type)
    return list(dict.fromkeys(names))


def verify_hop(hop: ResolvedTarget, key: paramiko.PKey, *, accept_new: bool) -> str:
    """Check the key a hop presented (a paramiko PKey, perhaps carrying a host certificate); raise
    HostKeyError unless trusted. Returns how it was trusted ("known", "certificate", "recorded")."""
    from devenv.remote import known_hosts_command

    name = lookup_name(hop)
    files = hop_files(hop)
    asked = known_hosts_command.run(hop, "HOSTNAME", name, key)   # after the files, as ssh asks it
    known = known_keys(hop.hostname, hop.port, name=name, files=files) + asked.keys
    plain_type, blob = key.get_name(), key.asbytes()
    label = f"{hop.label} ({name})"
    presented = f"{short_type(plain_type)} key {fingerprint(blob)}"
    cert_blob = _cert_blob(key)
    cert = parse_cert(cert_blob) if cert_blob else None

    _check_revoked_file(hop, label, presented, [blob] + ([cert.ca_blob] if cert else []))
    revoked = [k for k in known if k.revoked]
    for candidate in [blob] + ([cert.ca_blob] if cert else []):
        if any(k.blob == candidate for k in revoked):
            raise _revoked(label, revoked[0].source, presented)
    cert_problem = None
    if cert is not None:
        cas = [k for k in known if k.ca and k.blob == cert.ca_blob]
        if cas:  # a CA we trust signed it: valid, it is trusted; invalid, only the plain key may be (as in ssh)
            from devenv.remote import algorithms

            principal = hop.host_key_alias or hop.hostname
            cert_problem = cert.problem(principal, algorithms.allowed(getattr(hop, "options", None) or {},
                                                                      "casignaturealgorithms"))
            if not cert_problem:
                return "certificate"
        # no matching CA, or an invalid certificate: judge the plain key inside it, as ssh does
    trusted = [k for k in known if not k.revoked and not k.ca]
    if any(k.blob == blob for k in trusted):
        return "known"
    if _known_without_port(hop, files, plain_type, blob, trusted, label, presented):
        return "known"
    if cert_problem and not trusted:
        raise HostKeyError(f"host certificate of {label} is invalid: {cert_problem}",
                           "ask the host's admin to re-sign the host key (ssh-keygen -s CA -h -n NAME)")
    where = ", ".join(str(f) for f in files[:2]) or "no known_hosts file (UserKnownHostsFile none)"
    if trusted:
        same_type = [k for k in trusted if k.key_type == plain_type] or trusted
        was = ", ".join(f"{short_type(k.key_type)} key {fingerprint(k.blob)}" for k in same_type)
        source = same_type[0].source
        raise HostKeyError(
            f"HOST KEY CHANGED for {label}: {source} has {was}, the host now presents {presented}. "
            "Someone may be intercepting the connection (man-in-the-middle), or the host was reinstalled",
            f"do not accept it blindly: confirm the new fingerprint with the host's admin, then remove the old "
            f"entry with `ssh-keygen -f {source} -R '{name}'` and re-run with --accept-new-host",
        )
    strict = getattr(hop, "strict_host_key_checking", "ask")
    if not (accept_new or strict == "accept-new"):
        host_file = f"/etc/ssh/ssh_host_{short_type(plain_type).lower()}_key.pub"
        extra = (" (devenv does not take StrictHostKeyChecking no as consent; say accept-new for this host or "
                 "pass --accept-new-host)") if strict == "no" else ""
        if asked.problem:
            extra += f" ({asked.problem})"
        if str(getattr(hop, "options", {}).get("nohostauthenticationforlocalhost", "")).lower() in ("yes", "true"):
            extra += (" (devenv checks a localhost key too: it does not take NoHostAuthenticationForLocalhost yes, "
                      "where another local user's sshd on that port would go unnoticed)")
        raise HostKeyError(
            f"host key for {label} is not known: {presented} (looked in {where})",
            "re-run with --accept-new-host to trust and record it (verify the fingerprint with the host's admin "
            f"/ `ssh-keygen -lf {host_file}` on the host){extra}",
        )
    own = user_files(hop)
    if not own:  # ssh refuses too: with no user file the key can be neither recorded nor trusted next time
        raise HostKeyError(f"host key for {label} is not known: {presented}, and UserKnownHostsFile is none "
                           "(nowhere to record it)", "add the host's key to a GlobalKnownHostsFile, or set "
                           "UserKnownHostsFile to a file for this host")
    hashed = str(getattr(hop, "options", {}).get("hashknownhosts", "no")).lower() in ("yes", "true")
    record(name, plain_type, blob, own[0], hashed=hashed)
    return "recorded"


def _known_without_port(hop: ResolvedTarget, files: list[Path], key_type: str, blob: bytes, trusted: list[KnownKey],
                        label: str, presented: str) -> bool:
    """ssh's second look for a host on a port other than 22 (sshconnect.c, "checking without port
    identifier"): with no HostKeyAlias and no key of this type known as [host]:port, an entry for the bare host
    name with this very key lets it in. Only the files are read again (not KnownHostsCommand), nothing is
    recorded, and a different key there is no "changed" key, as in ssh (the key stays unknown)."""
    if getattr(hop, "host_key_alias", None) or hop.port == 22 or any(k.key_type == key_type for k in trusted):
        return False
    bare = known_keys(hop.hostname, 22, name=hop.hostname.lower(), files=files)
    for k in bare:
        if k.revoked and k.blob == blob:
            raise _revoked(label, k.source, presented)
    return any(not k.revoked and not k.ca and k.blob == blob for k in bare)


def _revoked(label: str, source: str, presented: str) -> HostKeyError:
    return HostKeyError(f"host key for {label} is marked @revoked in {source}: {presented}",
                        "do not connect; ask the host's admin for the current key")


def verify(label: str, hostname: str, port: int, key_type: str, blob: bytes, *, accept_new: bool,
           path: Path | None = None) -> None:
    """The single-file form (kept for callers that have no ResolvedTarget)."""
    hop = ResolvedTarget(label, hostname, port, user="", identity_files=(), identities_only=False, connect_timeout=0,
                         server_alive_interval=0, known_hosts_files=(str(path or paths.known_hosts_path()),))
    verify_hop(hop, paramiko.PKey.from_type_string(key_type, blob), accept_new=accept_new)


def record(name: str, key_type: str, blob: bytes, path: Path, *, hashed: bool = False) -> None:
    """Append one known_hosts line; a new file is 0600 in a 0700 directory."""
    if hashed:
        salt = os.urandom(20)
        digest = hmac.new(salt, name.encode(), hashlib.sha1).digest()
        name = f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"
    line = f"{name} {key_type} {base64.b64encode(blob).decode()}\n"
    if path.exists() and not path.is_file():  # /dev/null keeps nothing; a FIFO would block the write
        if path == Path(os.devnull):
            return
        raise HostKeyError(f"cannot record the host key in {path}: not a regular file",
                           "point UserKnownHostsFile / DEVENV_KNOWN_HOSTS at a known_hosts file")
    with _write_lock:
        if not path.parent.exists():
            path.parent.mkdir(parents=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "a") as f:
            if f.tell() > 0 and not path.read_bytes().endswith(b"\n"):
                line = "\n" + line
            f.write(line)


# --- RevokedHostKeys ----------------------------------------------------------------------------------

def _check_revoked_file(hop: ResolvedTarget, label: str, presented: str, blobs: list[bytes]) -> None:
    path = getattr(hop, "revoked_host_keys", None)
    if not path:
        return
    if Path(path) == Path(os.devnull):
        return
    try:
        if Path(path).exists() and not Path(path).is_file():  # a FIFO or a device: a read would not end
            raise OSError(0, "not a regular file")
        data = Path(path).read_bytes()
    except OSError as e:
        # OpenSSH refuses too: a revocation list it cannot read may be hiding a revoked key
        literal = any(mark in path for mark in ("~", "%", "${"))
        raise HostKeyError(f"cannot read RevokedHostKeys {path} to check {label}: {e.strerror or e}",
                           "fix or remove RevokedHostKeys in your ssh config" + (
                               " (OpenSSH 9.2 takes its path as written: no ~, %-tokens or ${VAR}; give the "
                               "full path)" if literal else "")) from None
    if data.startswith(_KRL_MAGIC):
        if any(_krl_revokes(path, b) for b in blobs):
            raise HostKeyError(f"host key for {label} is revoked by {path}: {presented}",
                               "do not connect; ask the host's admin for the current key")
        return
    for line in data.decode(errors="replace").splitlines():
        fields = line.split()
        if len(fields) < 2 or fields[0].startswith("#"):
            continue
        try:
            listed = base64.b64decode(fields[1], validate=True)
        except (binascii.Error, ValueError):
            continue
        if listed in blobs:
            raise HostKeyError(f"host key for {label} is revoked by {path}: {presented}",
                               "do not connect; ask the host's admin for the current key")


def _krl_revokes(krl: str, blob: bytes) -> bool:
    """A binary KRL (ssh-keygen -k) is judged by ssh-keygen -Q itself."""
    import tempfile

    key_type = paramiko.Message(blob).get_text()
    with tempfile.NamedTemporaryFile("w", suffix=".pub") as f:
        f.write(f"{key_type} {base64.b64encode(blob).decode()}\n")
        f.flush()
        try:
            proc = subprocess.run(["ssh-keygen", "-Q", "-f", krl, f.name], capture_output=True, text=True,
                                  timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            raise HostKeyError(f"cannot check the binary revocation list {krl} (ssh-keygen is missing)",
                               "install openssh-client, or list revoked keys as plain public keys") from None
    return proc.returncode != 0 or "REVOKED" in proc.stdout


# --- host certificates --------------------------------------------------------------------------------

@dataclass(frozen=True)
class HostCert:
    cert_type: int
    key_id: str
    principals: tuple[str, ...]
    valid_after: int
    valid_before: int
    ca_blob: bytes
    signature_ok: bool
    signature_type: str = ""

    def problem(self, principal: str, signature_types: list[str] | None = None) -> str | None:
        now = int(time.time())
        if signature_types is not None and self.signature_type not in signature_types:
            return (f"its CA signed it with {self.signature_type}, which CASignatureAlgorithms does not allow "
                    "(OpenSSH refuses SHA-1 RSA signatures by default)")
        if not self.signature_ok:
            return "its signature does not verify against the CA key"
        if self.cert_type != 2:
            return "it is a user certificate, not a host certificate"
        if now < self.valid_after:
            return "it is not yet valid"
        if now >= self.valid_before:
            return "it has expired"
        if self.principals and principal.lower() not in (p.lower() for p in self.principals):
            return f"it is not valid for '{principal}' (principals: {', '.join(self.principals)})"
        return None


def _cert_blob(key: paramiko.PKey) -> bytes | None:
    blob = getattr(key, "public_blob", None)
    if blob is not None and blob.key_type.endswith("-cert-v01@openssh.com"):
        return paramiko.Message(blob.key_blob).asbytes() if isinstance(blob.key_blob, bytes) else None
    return None


def parse_cert(blob: bytes) -> HostCert | None:
    """An OpenSSH certificate (PROTOCOL.certkeys); None when it cannot be read."""
    try:
        m = paramiko.Message(blob)
        cert_type_name = m.get_text()
        m.get_string()  # nonce
        if cert_type_name.startswith("ssh-ed25519"):
            m.get_string()
        elif cert_type_name.startswith("ecdsa"):
            m.get_string()
            m.get_string()
        elif cert_type_name.startswith(("ssh-rsa", "rsa-sha2")):
            m.get_mpint()
            m.get_mpint()
        else:
            return None
        m.get_int64()  # serial
        kind = m.get_int()
        key_id = m.get_text()
        principals_msg = paramiko.Message(m.get_binary())
        principals = []
        while principals_msg.get_remainder():
            principals.append(principals_msg.get_text())
        valid_after, valid_before = m.get_int64(), m.get_int64()
        m.get_binary()  # critical options
        m.get_binary()  # extensions
        m.get_binary()  # reserved
        ca_blob = m.get_binary()
        signed = blob[:m.packet.tell()]
        signature = m.get_binary()
        ca_type = paramiko.Message(ca_blob).get_text()
        ca = paramiko.PKey.from_type_string(ca_type, ca_blob)
        signature_type = paramiko.Message(signature).get_text()
        ok = bool(ca.verify_ssh_sig(signed, paramiko.Message(signature))) or _sha1_rsa_ok(ca, signed, signature)
    except Exception:  # a malformed certificate is simply not trusted through its CA
        return None
    return HostCert(kind, key_id, tuple(principals), valid_after, valid_before, ca_blob, ok, signature_type)


def _sha1_rsa_ok(ca: paramiko.PKey, signed: bytes, signature: bytes) -> bool:
    """A CA's `ssh-rsa` (SHA-1) signature, which paramiko no longer verifies: checked here so that a config
    allowing it (`CASignatureAlgorithms +ssh-rsa`) gets what ssh gives; without that, problem() refuses it."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding, rsa

    m = paramiko.Message(signature)
    key = getattr(ca, "key", None)
    if m.get_text() != "ssh-rsa" or not isinstance(key, rsa.RSAPublicKey):
        return False
    sign = m.get_binary()
    sign = b"\x00" * max(0, (key.key_size + 7) // 8 - len(sign)) + sign
    try:
        key.verify(sign, signed, padding.PKCS1v15(), hashes.SHA1())  # noqa: S303 - only where the config allows it
    except InvalidSignature:
        return False
    return True
