"""Who runs ssh here and how OpenSSH expands %-tokens, ${VAR} and ~ in config values (L1): shared by the
config resolvers (remote.sshconfig, remote.sshconfig_parser) and KnownHostsCommand."""

from __future__ import annotations

import os
import pwd
import re
import socket

from devenv.errors import ConnectError


def local_user() -> str:
    """The login name of the real uid, as OpenSSH takes it (never $USER, which the environment may change)."""
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def local_home() -> str:
    """`~` and %d in ssh config values, and where the default keys live: the real uid's passwd home, as
    OpenSSH takes it ($HOME is ignored, as ssh ignores it; a profile's own identity_file, like `ssh -i ~/k`
    typed in a shell, is expanded with $HOME)."""
    try:
        return pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        return os.environ.get("HOME") or "/"


# --- tokens --------------------------------------------------------------------------------------------

def token_table(*, hostname: str, port: int, user: str, original: str, alias: str | None) -> dict[str, str]:
    import hashlib

    local_full = socket.gethostname()  # %l: gethostname() as ssh takes it; %L: up to the first dot
    local_short = local_full.split(".")[0]
    return {
        "%": "%", "h": hostname, "p": str(port), "r": user, "n": original, "u": local_user(),
        "d": local_home(), "i": str(os.getuid()), "L": local_short, "l": local_full,
        "k": alias or original,
        "C": hashlib.sha1(f"{local_full}{hostname}{port}{user}".encode()).hexdigest(),
    }


def expand_tokens(text: str, tokens: dict[str, str], what: str, allowed: str | None = None,
                  env: bool = False) -> str:
    """%-tokens (and, with env, ${VAR}) as OpenSSH expands them, in one pass: what a token or a variable
    yields is never expanded again. An unknown token is an error (OpenSSH refuses it too)."""
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if env and text.startswith("${", i):
            end = text.find("}", i)
            name = text[i + 2:end] if end > 0 else ""
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise ConnectError(f"{what}: bad environment variable reference in '{text}'",
                                   "write it as ${NAME} in your ssh config")
            value = os.environ.get(name)
            if value is None:
                raise ConnectError(f"{what}: environment variable ${{{name}}} is not set",
                                   f"set {name} or change {what} in your ssh config")
            out.append(value)
            i = end + 1
            continue
        if c != "%":
            out.append(c)
            i += 1
            continue
        key = text[i + 1:i + 2]
        if not key or key not in tokens or (allowed is not None and key != "%" and key not in allowed):
            raise ConnectError(f"{what}: unknown token %{key} in '{text}'",
                               "see TOKENS in `man ssh_config` for those this option accepts")
        out.append(tokens[key])
        i += 2
    return "".join(out)


def expand_tilde(text: str, what: str) -> str:
    """A leading ~ or ~user, as OpenSSH's tilde_expand_filename (~ is the real uid's passwd home)."""
    if text.startswith("~/") or text == "~":
        return local_home() + text[1:]
    if text.startswith("~"):
        user, _, rest = text[1:].partition("/")
        try:
            return os.path.join(pwd.getpwnam(user).pw_dir, rest)
        except KeyError:
            raise ConnectError(f"{what}: unknown user in '{text}'", "fix the path in your ssh config") from None
    return text


def expand_path(text: str, tokens: dict[str, str], what: str) -> str:
    """~ (the local home), then ${VAR} and %-tokens in one pass, as OpenSSH expands file options."""
    return expand_tokens(expand_tilde(text, what), tokens, what, env=True)
