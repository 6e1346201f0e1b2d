"""Our own ssh_config reader, used only where no `ssh` client is installed; it returns the option table that
`ssh -G` would print, so the rest of devenv cannot tell the two apart.

It follows ssh_config(5) and readconf.c on the points that matter: command-line overrides first, then the
user's file, then /etc/ssh/ssh_config, the first value obtained wins (IdentityFile, CertificateFile and the
forwardings accumulate); Host patterns match the name as given; `Match host` matches HostName as set so far
(with %h expanded); `Include` (globs, relative to ~/.ssh or /etc/ssh) keeps the including block's state;
whichever of ProxyCommand and ProxyJump comes first wins; a word starting with '#' ends the line (but
ProxyCommand keeps its whole line, for the shell); `Match final` triggers the second pass OpenSSH makes.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import subprocess
from pathlib import Path

from devenv.errors import ConnectError

_ACCUMULATE = frozenset({"identityfile", "certificatefile", "localforward", "remoteforward", "dynamicforward",
                         "sendenv", "setenv"})
_RAW_REST = frozenset({"proxycommand", "localcommand", "remotecommand", "knownhostscommand"})
_MULTI_WORD = frozenset({"userknownhostsfile", "globalknownhostsfile", "canonicaldomains"})
_MAX_INCLUDE_DEPTH = 16
SYSTEM_CONFIG = "/etc/ssh/ssh_config"


def lookup(name: str, ov, config_file: Path | None) -> dict:
    """The `ssh -G`-style option table for `ssh [ov] name` (ov: sshconfig.Overrides)."""
    from devenv.remote.sshconfig import local_home, local_user

    user_name, _, host = name.rpartition("@")
    options: dict[str, object] = {}
    if user_name and not ov.user:
        options["user"] = user_name
    _apply_overrides(options, ov)
    files = [(config_file, False)] if config_file is not None else [
        (Path(local_home()) / ".ssh" / "config", False), (Path(SYSTEM_CONFIG), True)]
    state = _State(original=host, options=options)
    for final in (False, True):
        if final and not state.wants_final:
            break
        state.final = final
        for path, system in files:
            if path is not None and path.is_file():
                _read(path, state, active=True, system=system, depth=0)
    return _fill_defaults(options, host, local_user(), local_home())


class _State:
    def __init__(self, original: str, options: dict):
        self.original = original
        self.options = options
        self.final = False
        self.wants_final = False


def _apply_overrides(options: dict, ov) -> None:
    if ov.user:
        options["user"] = ov.user
    if ov.port:
        options["port"] = str(ov.port)
    if ov.identity_file:
        options["identityfile"] = [os.path.expanduser(ov.identity_file)]
    if ov.jump:
        options["proxyjump"] = ov.jump
        options.setdefault("proxycommand", "none")
    if ov.hostname:
        options["hostname"] = ov.hostname
    if ov.connect_timeout:
        options["connecttimeout"] = str(max(1, int(round(ov.connect_timeout))))


def _read(path: Path, state: _State, *, active: bool, system: bool, depth: int, never: bool = False) -> None:
    if depth > _MAX_INCLUDE_DEPTH:
        raise ConnectError(f"{path}: Include nested too deeply (a loop?)", "check the Include lines")
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError as e:
        raise ConnectError(f"cannot read ssh config {path}: {e.strerror}", "check the file's permissions") from None
    for number, line in enumerate(lines, 1):
        keyword, args, raw = _split(line)
        if not keyword:
            continue
        where = f"{path} line {number}"
        if keyword == "host":
            active = not never and _host_matches(args, state.original)
        elif keyword == "match":
            active = not never and _match(args, state, where)
        elif keyword == "include":
            for pattern in args:
                from devenv.remote.sshconfig import local_home

                base = Path(SYSTEM_CONFIG).parent if system else Path(local_home()) / ".ssh"
                if pattern.startswith("~/"):
                    pattern = local_home() + pattern[1:]
                full = pattern if os.path.isabs(pattern) else str(base / pattern)
                for included in sorted(glob.glob(full)):
                    # the included file starts in this block's state, and this block's state resumes after it
                    _read(Path(included), state, active=active, system=system, depth=depth + 1,
                          never=never or not active)
        elif active:
            _set(state.options, keyword, args, raw, state.original)


def _set(options: dict, keyword: str, args: list[str], raw: str, original: str) -> None:
    if keyword in _ACCUMULATE:
        options.setdefault(keyword, [])
        options[keyword].extend(args[:1] if keyword in ("identityfile", "certificatefile") else args)
        return
    if keyword in options or not args:
        return
    if keyword == "proxyjump":
        if "proxycommand" in options:
            return  # ProxyCommand came first
        options["proxycommand"] = "none"
    elif keyword == "proxycommand" and "proxyjump" in options:
        return
    if keyword in _RAW_REST:
        options[keyword] = raw
    elif keyword in _MULTI_WORD:
        options[keyword] = " ".join(args)
    elif keyword == "hostname":
        options[keyword] = args[0].replace("%h", original).replace("%%", "%")
    else:
        options[keyword] = args[0]


def _split(line: str) -> tuple[str, list[str], str]:
    """(keyword lower-cased, argument words, the raw rest of the line) as readconf.c splits a line."""
    text = line.strip()
    if not text or text.startswith("#"):
        return "", [], ""
    i = 0
    while i < len(text) and text[i] not in " \t=":
        i += 1
    keyword = text[:i].lower()
    rest = text[i:].lstrip(" \t")
    if rest.startswith("="):
        rest = rest[1:].lstrip(" \t")
    return keyword, _words(rest), rest


def _words(text: str) -> list[str]:
    """argv_split: quotes group words, a backslash escapes, a word starting with '#' ends the line."""
    words: list[str] = []
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i] in " \t":
            i += 1
        if i >= n or text[i] == "#":
            break
        word, quote = [], None
        while i < n:
            c = text[i]
            if quote:
                if c == quote:
                    quote = None
                elif c == "\\" and i + 1 < n and text[i + 1] in (quote, "\\"):
                    i += 1
                    word.append(text[i])
                else:
                    word.append(c)
            elif c in "\"'":
                quote = c
            elif c == "\\" and i + 1 < n:
                i += 1
                word.append(text[i])
            elif c in " \t":
                break
            else:
                word.append(c)
            i += 1
        words.append("".join(word))
    return words


def _pattern_list_matches(patterns: list[str], value: str) -> bool:
    """OpenSSH's match_pattern_list: any positive match, and no negated one."""
    matched = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        if fnmatch.fnmatchcase(value.lower(), pattern.lstrip("!").lower()):
            if negated:
                return False
            matched = True
    return matched


def _host_matches(patterns: list[str], original: str) -> bool:
    words = [p for word in patterns for p in word.split(",") if p]
    return _pattern_list_matches(words, original)


def _match(args: list[str], state: _State, where: str) -> bool:
    from devenv.remote.sshconfig import local_user

    options = state.options
    result, i = True, 0
    if not args:
        raise ConnectError(f"{where}: Match needs criteria", "see `man ssh_config`")
    while i < len(args):
        word = args[i]
        negate = word.startswith("!")
        criterion = word.lstrip("!").lower()
        if criterion == "all":
            ok = True
        elif criterion in ("final", "canonical"):
            if criterion == "final":
                state.wants_final = True
            ok = state.final
        else:
            if i + 1 >= len(args):
                raise ConnectError(f"{where}: Match {criterion} needs an argument", "see `man ssh_config`")
            i += 1
            value = args[i]
            if criterion == "host":
                hostname = str(options.get("hostname") or state.original)
                ok = _pattern_list_matches(value.split(","), hostname)
            elif criterion == "originalhost":
                ok = _pattern_list_matches(value.split(","), state.original)
            elif criterion == "user":
                ok = _pattern_list_matches(value.split(","), str(options.get("user") or local_user()))
            elif criterion == "localuser":
                ok = _pattern_list_matches(value.split(","), local_user())
            elif criterion == "exec":
                ok = _match_exec(value, state)
            else:
                raise ConnectError(f"{where}: unsupported Match criterion '{criterion}'", "see `man ssh_config`")
        if negate:
            ok = not ok
        result = result and ok
        i += 1
    return result


def _match_exec(command: str, state: _State) -> bool:
    from devenv.remote.sshconfig import expand_tokens, local_user, token_table

    options = state.options
    tokens = token_table(hostname=str(options.get("hostname") or state.original),
                         port=int(str(options.get("port") or 22)),
                         user=str(options.get("user") or local_user()), original=state.original, alias=None)
    shell = os.environ.get("SHELL") or "/bin/sh"
    try:
        return subprocess.run([shell, "-c", expand_tokens(command, tokens, "Match exec")],
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _fill_defaults(options: dict, host: str, user: str, home: str) -> dict:
    """The defaults `ssh -G` prints, and its expansions of ~ in UserKnownHostsFile and IdentityAgent."""
    from devenv.remote.sshconfig import expand_path, token_table

    out = dict(options)
    out.setdefault("hostname", host)
    out.setdefault("user", user)
    out.setdefault("port", "22")
    out.setdefault("identityfile", [f"~/.ssh/id_{k}" for k in ("rsa", "ecdsa", "ecdsa_sk", "ed25519",
                                                                 "ed25519_sk", "xmss", "dsa")])
    out.setdefault("userknownhostsfile", "~/.ssh/known_hosts ~/.ssh/known_hosts2")
    out.setdefault("globalknownhostsfile", "/etc/ssh/ssh_known_hosts /etc/ssh/ssh_known_hosts2")
    out.setdefault("stricthostkeychecking", "ask")
    out.setdefault("connecttimeout", "none")
    if out.get("proxycommand") == "none" and "proxyjump" not in options:
        out.pop("proxycommand")
    tokens = token_table(hostname=str(out["hostname"]), port=int(str(out["port"])), user=str(out["user"]),
                         original=host, alias=out.get("hostkeyalias"))  # type: ignore[arg-type]
    out["userknownhostsfile"] = " ".join(expand_path(p, tokens, "UserKnownHostsFile")
                                         for p in str(out["userknownhostsfile"]).split())
    if out.get("identityagent") and str(out["identityagent"]).lower() not in ("none", "ssh_auth_sock"):
        out["identityagent"] = expand_path(str(out["identityagent"]), tokens, "IdentityAgent")
    return out
