"""The key pair environments accept (L1): the container's sshd lets in this key and no other.

devenv keeps its own ed25519 pair in the config dir (not the state dir: losing the cache must not change the
key, or every environment would look changed). $DEVENV_SSH_KEY names an existing private key instead
(its .pub must sit next to it). Made with ssh-keygen when present, else with `cryptography` (paramiko's own
dependency), in OpenSSH's format either way, 0600.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from devenv.config import paths, validate
from devenv.errors import BadInput, DevenvError


@dataclass(frozen=True)
class EnvKey:
    private_path: Path
    public_line: str        # "ssh-ed25519 AAAA... comment"

    @property
    def fingerprint(self) -> str:
        """OpenSSH's SHA256 fingerprint ("SHA256:..."), as ssh-keygen -l prints it."""
        blob = base64.b64decode(self.public_line.split()[1])
        return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def default_key_path() -> Path:
    return paths.config_dir() / "ssh" / "id_ed25519"


def chosen_key() -> tuple[Path, Path] | None:
    """$DEVENV_SSH_KEY's (private, public) paths, checked: a bad value is bad input, found before connecting."""
    chosen = os.environ.get("DEVENV_SSH_KEY")
    if not chosen:
        return None
    problem = validate.path_problem(chosen)
    if problem:
        raise BadInput(f"DEVENV_SSH_KEY {validate.preview(chosen)} {problem}",
                       "point DEVENV_SSH_KEY at a private key whose .pub is next to it, or unset it")
    private = paths.expand_home(chosen, "DEVENV_SSH_KEY")
    public = private.with_name(private.name + ".pub")
    if not private.is_file() or not public.is_file():
        raise BadInput(f"DEVENV_SSH_KEY={chosen}: need both {private} and {public}",
                       "point DEVENV_SSH_KEY at a private key whose .pub is next to it, or unset it")
    return private, public


def ensure_key() -> EnvKey:
    chosen = chosen_key()
    if chosen:
        private, public = chosen
        return EnvKey(private, _public_line(public))
    private = default_key_path()
    public = private.with_name(private.name + ".pub")
    if not private.is_file() or not public.is_file():
        _generate(private)
    return EnvKey(private, _public_line(public))


def _public_line(path: Path) -> str:
    with open(path, "rb") as f:
        line = f.read(64 * 1024).decode("utf-8", "replace").strip()
    parts = line.split()
    if (len(parts) < 2 or not parts[0].startswith(("ssh-", "ecdsa-", "sk-")) or "\n" in line
            or validate.text_problem(line)):
        raise BadInput(f"{path} is not an OpenSSH public key (one line)", "regenerate it with ssh-keygen")
    try:
        base64.b64decode(parts[1], validate=True)
    except ValueError:
        raise BadInput(f"{path} is not an OpenSSH public key (its key is not base64)",
                       "regenerate it with ssh-keygen") from None
    return line


def _generate(private: Path) -> None:
    paths.ensure_private_dir(private.parent)
    for stale in (private, private.with_name(private.name + ".pub")):
        stale.unlink(missing_ok=True)
    comment = "devenv-environments"
    keygen = shutil.which("ssh-keygen")
    if keygen:
        done = subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(private)],
                              capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            raise DevenvError(f"ssh-keygen could not make {private}: {done.stderr.strip()}",
                              f"check that {private.parent} is writable")
        os.chmod(private, 0o600)
        return
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                            serialization.NoEncryption())
    pub = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    paths.write_private(private, pem.decode())
    private.with_name(private.name + ".pub").write_text(f"{pub.decode()} {comment}\n")
