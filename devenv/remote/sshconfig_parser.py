"""Our own ssh_config reader, used only where no `ssh` client is installed; it returns the option table that
`ssh -G` would print, so the rest of devenv cannot tell the two apart.

It follows ssh_config(5) and readconf.c on the points that matter: command-line overrides first, then the
user's file, then /etc/ssh/ssh_config, the first value obtained wins (IdentityFile, CertificateFile and the
forwardings accumulate); Host patterns match the name as given; `Match host` matches HostName as set so far
(with %h expanded); `Include` (globs, relative to ~/.ssh or /etc/ssh) keeps the including block's state;
whichever of ProxyCommand and ProxyJump comes first wins; a word starting with '#' ends the line (but
ProxyCommand keeps its whole line, for the shell); `Match final` triggers the second pass OpenSSH makes, in
which Host and Match host see the HostName. `Host` patterns are case-sensitive against the lower-cased name,
one pattern a word (a comma is no separator there, as in readconf.c; `Match host` takes comma lists, any case).
An unknown keyword is an error naming file and line, as ssh makes it (IgnoreUnknown lifts it); so are the bad
values of the options devenv uses (Port, yes/no flags, times). Lines end at '\n' only, as ssh reads them. What
it cannot do as ssh does (CanonicalizeHostname, Match canonical/localnetwork/tagged) is a clear error.
"""

from __future__ import annotations

import glob
import os
import re
import socket
import subprocess
from pathlib import Path

from devenv.errors import ProfileError
from devenv.remote.ssh_g import Overrides, SshOptions

_ACCUMULATE = frozenset({"identityfile", "certificatefile", "localforward", "remoteforward", "dynamicforward",
                         "sendenv", "setenv"})
_RAW_REST = frozenset({"proxycommand", "localcommand", "remotecommand", "knownhostscommand"})
_MULTI_WORD = frozenset({"canonicaldomains"})
_FILE_LISTS = frozenset({"userknownhostsfile", "globalknownhostsfile"})   # kept as lists: a path may hold a space
_MAX_INCLUDE_DEPTH = 16
# Every keyword OpenSSH 9.2's ssh accepts (probed from its own parser: anything else is "Bad configuration
# option"), plus the few later releases added, so a config written for a newer ssh is not refused.
KEYWORDS = frozenset({
    "addkeystoagent", "addressfamily", "afstokenpassing", "batchmode", "bindaddress", "bindinterface",
    "canonicaldomains", "canonicalizefallbacklocal", "canonicalizehostname", "canonicalizemaxdots",
    "canonicalizepermittedcnames", "casignaturealgorithms", "certificatefile", "challengeresponseauthentication",
    "checkhostip", "cipher", "ciphers", "clearallforwardings", "compression", "compressionlevel",
    "connectionattempts", "connecttimeout", "controlmaster", "controlpath", "controlpersist", "dsaauthentication",
    "dynamicforward", "enableescapecommandline", "enablesshkeysign", "escapechar", "exitonforwardfailure",
    "fallbacktorsh", "fingerprinthash", "forkafterauthentication", "forwardagent", "forwardx11",
    "forwardx11timeout", "forwardx11trusted", "gatewayports", "globalknownhostsfile", "globalknownhostsfile2",
    "gssapiauthentication", "gssapiclientidentity", "gssapidelegatecredentials", "gssapikexalgorithms",
    "gssapikeyexchange", "gssapirenewalforcesrekey", "gssapiserveridentity", "gssapitrustdns", "hashknownhosts",
    "host", "hostbasedacceptedalgorithms", "hostbasedauthentication", "hostbasedkeytypes", "hostkeyalgorithms",
    "hostkeyalias", "hostname", "identitiesonly", "identityagent", "identityfile", "identityfile2",
    "ignoreunknown", "include", "ipqos", "kbdinteractiveauthentication", "kbdinteractivedevices",
    "kerberosauthentication", "kerberostgtpassing", "kexalgorithms", "knownhostscommand", "localcommand",
    "localforward", "loglevel", "logverbose", "macs", "match", "nohostauthenticationforlocalhost",
    "numberofpasswordprompts", "passwordauthentication", "permitlocalcommand", "permitremoteopen",
    "pkcs11provider", "port", "preferredauthentications", "protocol", "protocolkeepalives", "proxycommand",
    "proxyjump", "proxyusefdpass", "pubkeyacceptedalgorithms", "pubkeyacceptedkeytypes", "pubkeyauthentication",
    "rekeylimit", "remotecommand", "remoteforward", "requesttty", "requiredrsasize", "revokedhostkeys",
    "rhostsauthentication", "rhostsrsaauthentication", "securitykeyprovider", "sendenv", "serveralivecountmax",
    "serveraliveinterval", "sessiontype", "setenv", "setuptimeout", "skeyauthentication", "smartcarddevice",
    "stdinnull", "streamlocalbindmask", "streamlocalbindunlink", "stricthostkeychecking", "syslogfacility",
    "tcpkeepalive", "tisauthentication", "tunnel", "tunneldevice", "updatehostkeys", "useblacklistedkeys",
    "useprivilegedport", "user", "userknownhostsfile", "userknownhostsfile2", "useroaming", "usersh",
    "verifyhostkeydns", "visualhostkey", "xauthlocation",
    "channeltimeout", "obscurekeystroketiming", "tag", "refuseconnection", "warnweakcrypto",
})
# Keywords whose value devenv uses or that change how ssh connects: exactly one argument, checked like ssh.
_FLAGS = frozenset({"identitiesonly", "batchmode", "hashknownhosts", "checkhostip", "forwardagent",
                    "proxyusefdpass", "tcpkeepalive", "compression"})
_TIMES = frozenset({"connecttimeout", "serveraliveinterval"})
_SINGLE = frozenset({"user", "hostname", "port", "hostkeyalias", "identityagent", "proxyjump", "revokedhostkeys",
                     "stricthostkeychecking", "serveralivecountmax", "canonicalizehostname", "pubkeyauthentication",
                     "addressfamily", "bindaddress", "bindinterface",
                     "controlpath", "controlmaster", "identityfile", "certificatefile", "ignoreunknown"}
                    | _FLAGS | _TIMES)
_STRICT = frozenset({"yes", "no", "ask", "accept-new", "true", "false", "off"})
_PUBKEY = frozenset({"yes", "no", "true", "false", "unbound", "host-bound"})
_ADD_KEYS = frozenset({"yes", "no", "ask", "confirm", "true", "false"})
SYSTEM_CONFIG = "/etc/ssh/ssh_config"


def lookup(name: str, ov: Overrides, config_file: Path | None) -> SshOptions:
    """The `ssh -G`-style option table for `ssh [ov] name` (ov: ssh_g.Overrides)."""
    from devenv.remote.ssh_tokens import local_home, local_user

    user_name, _, host = name.rpartition("@")
    options: SshOptions = {}
    if user_name and not ov.user:
        options["user"] = user_name
    _apply_overrides(options, ov)
    # (path, system file, check its permissions): ssh checks ~/.ssh/config's owner and mode, not a -F file's
    files = [(config_file, False, False)] if config_file is not None else [
        (Path(local_home()) / ".ssh" / "config", False, True), (Path(SYSTEM_CONFIG), True, False)]
    state = _State(original=host, options=options)
    for final in (False, True):
        if final and not state.wants_final:
            break
        if final:  # ssh's second pass: Host and Match host see the HostName, lower-cased (ssh.c sets host to it)
            state.host = str(options.get("hostname") or state.host).lower()
        state.final = final
        for path, system, checkperm in files:
            if path is None or not path.is_file():
                continue  # a missing file, or a directory (ssh reads one as empty)
            if config_file is None and not os.access(path, os.R_OK):
                continue  # ssh silently skips an unreadable ~/.ssh/config (a -F file it cannot open is fatal)
            _read(path, state, active=True, system=system, depth=0, checkperm=checkperm)
    return _fill_defaults(options, host, local_user(), local_home())


class _State:
    def __init__(self, original: str, options: SshOptions):
        self.original = original
        self.host = original  # Host patterns see the name as given (case-sensitive); HostName is lower-cased later
        self.options = options
        self.final = False
        self.wants_final = False


def _apply_overrides(options: SshOptions, ov: Overrides) -> None:
    if ov.user:
        options["user"] = ov.user
    if ov.port:
        options["port"] = str(ov.port)
    if ov.identity_file and os.path.exists(os.path.expanduser(ov.identity_file)):
        # `ssh -i` drops a file it cannot stat (with a warning), so OpenSSH's default keys stay in play
        options["identityfile"] = [os.path.expanduser(ov.identity_file)]
    if ov.jump:
        options["proxyjump"] = ov.jump
    if ov.hostname:
        options["hostname"] = ov.hostname
    if ov.connect_timeout:
        options["connecttimeout"] = str(max(1, int(round(ov.connect_timeout))))


def _bad(where: str, what: str) -> ProfileError:
    return ProfileError(f"{where}: {what}", "fix that line of your ssh config (`ssh -G HOST` reports the same)")


def _check_perms(path: Path) -> None:
    """readconf.c's secure_permissions: owned by us or root, writable by nobody else."""
    st = path.stat()
    if (st.st_uid not in (0, os.getuid())) or st.st_mode & 0o022:
        raise ProfileError(f"Bad owner or permissions on {path}",
                           f"ssh refuses it too: `chmod go-w {path}` (and own it yourself)")


def _read(path: Path, state: _State, *, active: bool, system: bool, depth: int, never: bool = False,
          checkperm: bool = False) -> None:
    if depth > _MAX_INCLUDE_DEPTH:
        raise ProfileError(f"{path}: Include nested too deeply (a loop?)", "check the Include lines")
    try:
        if checkperm:
            _check_perms(path)
        data = path.read_bytes()
    except IsADirectoryError:
        return  # ssh reads a directory as an empty file
    except OSError as e:
        raise ProfileError(f"Can't open user config file {path}: {e.strerror}",
                           "check the file's permissions") from None
    # ssh reads lines up to '\n' and strips trailing blanks (so CRLF files work); no other line breaks
    for number, raw_line in enumerate(data.split(b"\n"), 1):
        line = raw_line.decode("utf-8", errors="replace").rstrip(" \t\r\n\f")
        where = f"{path} line {number}"
        keyword, args, raw = _split(line, where)
        if not keyword:
            continue
        if not raw:
            raise _bad(where, f'no argument after keyword "{keyword}"')
        if keyword not in KEYWORDS:
            ignored = state.options.get("ignoreunknown")
            if ignored and _pattern_list_matches(str(ignored).split(","), keyword, lower=True):
                continue
            raise _bad(where, f"Bad configuration option: {keyword}")
        _check_value(keyword, args, where)
        if keyword == "addkeystoagent":
            _check_add_keys(args, where)
        if keyword == "host":
            active = not never and _host_matches(args, state.host)
        elif keyword == "match":
            active = _match(_strdelim_words(raw, where), state, where) and not never
        elif keyword == "include":
            for pattern in args:
                from devenv.remote.ssh_tokens import local_home

                base = Path(SYSTEM_CONFIG).parent if system else Path(local_home()) / ".ssh"
                if pattern.startswith("~/"):
                    pattern = local_home() + pattern[1:]
                full = pattern if os.path.isabs(pattern) else str(base / pattern)
                for included in sorted(glob.glob(full)):
                    # the included file starts in this block's state, and this block's state resumes after it
                    _read(Path(included), state, active=active, system=system, depth=depth + 1,
                          never=never or not active, checkperm=True)
        elif active:
            if keyword == "canonicalizehostname" and args[0].lower() not in ("no", "false"):
                raise ProfileError(
                    f"{where}: CanonicalizeHostname {args[0]} is not supported by devenv's built-in ssh config "
                    "parser (it would need ssh's DNS canonicalization)",
                    "install OpenSSH's client (openssh-client): devenv then asks `ssh -G`, which does it")
            _set(state.options, keyword, args, raw, state.host, where)


def _check_value(keyword: str, args: list[str], where: str) -> None:
    """The checks ssh makes on the options devenv uses, whether or not the line's block applies."""
    if keyword in ("userknownhostsfile", "globalknownhostsfile"):
        if "" in args:
            raise _bad(where, f"keyword {keyword} empty argument")
        if len(args) > 1 and any(a.lower() == "none" for a in args):
            raise _bad(where, f'keyword {keyword} "none" argument must appear alone.')
    if keyword not in _SINGLE:
        return
    if not args:
        raise _bad(where, "missing argument.")
    if len(args) > 1:
        raise _bad(where, f"keyword {keyword} extra arguments at end of line")
    value = args[0]
    if not value and keyword not in ("identityfile", "certificatefile"):
        raise _bad(where, "Missing argument.")
    if keyword == "port" and _port_number(value) is None:
        raise _bad(where, f"Bad port '{value}'.")
    if keyword in _FLAGS and value.lower() not in ("yes", "no", "true", "false"):
        raise _bad(where, f'unsupported option "{value}".')
    if keyword == "stricthostkeychecking" and value.lower() not in _STRICT:
        raise _bad(where, f'unsupported option "{value}".')
    if keyword in _TIMES and convtime(value) is None:
        raise _bad(where, f"invalid time value '{value}'.")
    if keyword == "serveralivecountmax" and not re.fullmatch(r"-?\d+", value):
        raise _bad(where, f"integer value '{value}' invalid.")
    if keyword == "serveralivecountmax" and int(value) < 0:
        raise _bad(where, "integer value too small.")
    if keyword == "addressfamily" and value.lower() not in ("any", "inet", "inet6"):
        raise _bad(where, f'unsupported option "{value}".')
    if keyword == "pubkeyauthentication" and value.lower() not in _PUBKEY:
        raise _bad(where, f'unsupported option "{value}".')


def _check_add_keys(args: list[str], where: str) -> None:
    """AddKeysToAgent: yes/no/ask/confirm, a lifetime, or `confirm` and a lifetime (readconf.c)."""
    state = args[0].lower() if args else ""
    if len(args) == 2 and state == "confirm" and convtime(args[1]) is not None:
        return
    if len(args) == 1 and (state in _ADD_KEYS or convtime(args[0]) is not None):
        return
    raise _bad(where, "unsupported option")


def _port_number(value: str) -> int | None:
    """a2port: a decimal 1-65535, or a tcp service name from /etc/services ('ssh' is 22)."""
    if value.isdigit():
        return int(value) if 0 < int(value) < 65536 else None
    try:
        return socket.getservbyname(value, "tcp")
    except OSError:
        return None


def convtime(value: str) -> int | None:
    """misc.c's convtime: '90', '1m30s', '2h' -> seconds; None when malformed."""
    if value.isdigit():
        return int(value)
    parts = re.findall(r"(\d+)([sSmMhHdDwW]?)", value)
    if not parts or "".join(n + u for n, u in parts) != value:
        return None
    scale = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    return sum(int(n) * scale[u.lower()] for n, u in parts)


def _set(options: SshOptions, keyword: str, args: list[str], raw: str, host: str, where: str) -> None:
    if keyword in _ACCUMULATE:
        values = options.setdefault(keyword, [])
        assert isinstance(values, list)  # an accumulating option only ever holds a list
        values.extend(args[:1] if keyword in ("identityfile", "certificatefile") else args)
        return
    if not args:
        return
    if keyword == "proxyjump":
        # the first of ProxyJump and ProxyCommand wins; `ProxyJump none` stops later ProxyJumps only
        if "proxyjump" in options or ("proxycommand" in options and args[0].lower() != "none"):
            return
        options["proxyjump"] = args[0].lower() if args[0].lower() == "none" else args[0]
        return
    if keyword == "proxycommand" and str(options.get("proxyjump") or "none").lower() != "none":
        return
    if keyword in options:
        return
    if keyword in _RAW_REST:
        options[keyword] = raw
    elif keyword in _FILE_LISTS:
        options[keyword] = list(args)
    elif keyword in _MULTI_WORD:
        options[keyword] = " ".join(args)
    elif keyword == "hostname":
        options[keyword] = _expand_hostname(args[0], host, where)
    elif keyword in _TIMES:
        options[keyword] = str(convtime(args[0]))
    elif keyword == "port":
        options[keyword] = str(_port_number(args[0]))
    else:
        options[keyword] = args[0]


def _expand_hostname(value: str, host: str, where: str) -> str:
    """HostName takes %h and %% only, in one pass (ssh.c); any other token makes ssh refuse the config."""
    bad = re.search(r"%([^h%]|$)", re.sub(r"%[h%]", "", value))
    if bad:
        raise ProfileError(f"{where}: HostName '{value}': percent_expand: unknown key %{bad.group(1)}",
                           "HostName accepts only %h and %%; fix that line of your ssh config (`ssh -G HOST` "
                           "refuses it too)")
    return re.sub(r"%([h%])", lambda m: host if m.group(1) == "h" else "%", value)


def _split(line: str, where: str = "") -> tuple[str, list[str], str]:
    """(keyword lower-cased, argument words, the raw rest of the line) as readconf.c splits a line."""
    text = line.strip(" \t")
    if not text or text.startswith("#"):
        return "", [], ""
    if text.startswith('"'):  # strdelim: a keyword may be quoted
        end = text.find('"', 1)
        if end < 0:
            raise _bad(where or "ssh config", "invalid quotes")
        keyword, rest = text[1:end].lower(), text[end + 1:].lstrip(" \t")
    else:
        i = 0
        while i < len(text) and text[i] not in " \t=":
            i += 1
        keyword = text[:i].lower()
        rest = text[i:].lstrip(" \t")
    if rest.startswith("="):
        rest = rest[1:].lstrip(" \t")
    return keyword, _words(rest, where), rest


def _words(text: str, where: str = "") -> list[str]:
    """misc.c's argv_split: quotes group words; a backslash escapes a quote, a backslash, or (unquoted) a
    blank, and is kept before anything else; a word starting with '#' ends the line."""
    words: list[str] = []
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i] in " \t":
            i += 1
        if i >= n or text[i] == "#":
            break
        word, quote = [], ""
        while i < n:
            c = text[i]
            if c == "\\" and i + 1 < n and (text[i + 1] in "'\"\\" or (not quote and text[i + 1] == " ")):
                i += 1
                word.append(text[i])
            elif not quote and c in " \t":
                break
            elif not quote and c in "\"'":
                quote = c
            elif quote and c == quote:
                quote = ""
            else:
                word.append(c)
            i += 1
        if quote:
            raise _bad(where or "ssh config", "invalid quotes")
        words.append("".join(word))
    return words


def _strdelim_words(text: str, where: str) -> list[str]:
    """A Match line's words as OpenSSH 9.2's strdelim cuts them: blanks and one '=' separate, a double quote
    groups (single quotes and backslashes are plain characters), a word starting with '#' ends the line."""
    words: list[str] = []
    rest = text
    while rest:
        cut = re.search(r'[ \t"=]', rest)
        if cut is None:
            word, rest = rest, ""
        elif cut.group() == '"':
            start = cut.start()
            close = rest.find('"', start + 1)
            if close < 0:
                raise _bad(where, "invalid quotes")
            word, rest = rest[:start] + rest[start + 1:close], rest[close + 1:].lstrip(" \t")
        else:
            word, rest = rest[:cut.start()], rest[cut.end():].lstrip(" \t")
            if cut.group() != "=" and rest.startswith("="):
                rest = rest[1:].lstrip(" \t")
        if word.startswith("#"):
            break
        words.append(word)
    return words


def _glob_match(pattern: str, value: str) -> bool:
    """match.c's match_pattern: only '*' and '?' are wildcards ('[' is literal)."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, re.DOTALL) is not None


def _pattern_list_matches(patterns: list[str], value: str, *, lower: bool = False) -> bool:
    """OpenSSH's match_pattern_list: any positive match, and no negated one (lower: both sides lower-cased)."""
    matched = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        pat = pattern[1:] if negated else pattern
        if _glob_match(pat.lower() if lower else pat, value.lower() if lower else value):
            if negated:
                return False
            matched = True
    return matched


def _host_matches(patterns: list[str], host: str) -> bool:
    """`Host`: one pattern a word (no comma lists), case-sensitive against the lower-cased host."""
    return _pattern_list_matches(patterns, host)


def _match(args: list[str], state: _State, where: str) -> bool:
    """readconf.c's match_cfg_line (9.2): criteria are ANDed; `all` stands alone; an `exec` after a false
    criterion is not run."""
    from devenv.remote.ssh_tokens import local_user

    options = state.options
    result, attributes, i = True, 0, 0
    while i < len(args):
        word = args[i]
        negate = word.startswith("!")
        criterion = (word[1:] if negate else word).lower()
        if criterion == "all":
            if attributes > 1 or i + 1 < len(args):
                raise _bad(where, f"'{word}' cannot be combined with other Match attributes")
            return result and not negate
        attributes += 1
        if criterion in ("final", "canonical"):
            # ssh makes its second pass only for `Match final` (or canonicalization, refused above), and
            # `canonical` is true in that pass as `final` is
            if criterion == "final":
                state.wants_final = True
            ok = state.final
        else:
            if i + 1 >= len(args) or not args[i + 1]:
                raise _bad(where, f"Missing Match criteria for {criterion}")
            i += 1
            value = args[i]
            if criterion == "host":
                hostname = str(options.get("hostname") or state.host)
                ok = _pattern_list_matches(value.split(","), hostname, lower=True)
            elif criterion == "originalhost":
                ok = _pattern_list_matches(value.split(","), state.original, lower=True)
            elif criterion == "user":
                ok = _pattern_list_matches(value.split(","), str(options.get("user") or local_user()))
            elif criterion == "localuser":
                ok = _pattern_list_matches(value.split(","), local_user())
            elif criterion == "exec":
                ok = _match_exec(value, state) if result else False  # skipped, as ssh skips it
            else:
                raise ProfileError(f"{where}: Unsupported Match attribute {criterion} (devenv's built-in ssh "
                                   "config parser knows all, canonical, final, exec, host, originalhost, user and "
                                   "localuser)", "install OpenSSH's client (openssh-client), or see "
                                   "`man ssh_config`")
        if negate and not (criterion == "exec" and not result):
            ok = not ok
        result = result and ok
        i += 1
    if attributes == 0:
        raise _bad(where, "One or more attributes required for Match")
    return result


def _match_exec(command: str, state: _State) -> bool:
    from devenv.remote.ssh_tokens import expand_tokens, local_user, token_table

    options = state.options
    tokens = token_table(hostname=str(options.get("hostname") or state.host),
                         port=int(str(options.get("port") or 22)),
                         user=str(options.get("user") or local_user()), original=state.original, alias=None)
    shell = os.environ.get("SHELL") or "/bin/sh"
    try:
        return subprocess.run([shell, "-c", expand_tokens(command, tokens, "Match exec")],
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _word(options: SshOptions, keyword: str) -> str | None:
    """A single-valued option's value (None when unset; the options that accumulate are lists)."""
    value = options.get(keyword)
    return value if isinstance(value, str) else None


def _fill_defaults(options: SshOptions, host: str, user: str, home: str) -> SshOptions:
    """The defaults `ssh -G` prints, and its expansions of ~ in UserKnownHostsFile and IdentityAgent."""
    from devenv.remote.ssh_tokens import expand_path, token_table

    out = dict(options)
    out.setdefault("hostname", host)
    out["hostname"] = str(out["hostname"]).lower()  # ssh.c lower-cases the host name once resolved
    out.setdefault("user", user)
    out.setdefault("port", "22")
    out.setdefault("identityfile", [f"~/.ssh/id_{k}" for k in ("rsa", "ecdsa", "ecdsa_sk", "ed25519",
                                                                 "ed25519_sk", "xmss", "dsa")])
    out.setdefault("userknownhostsfile", ["~/.ssh/known_hosts", "~/.ssh/known_hosts2"])
    out.setdefault("globalknownhostsfile", ["/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2"])
    out.setdefault("stricthostkeychecking", "ask")
    out.setdefault("connecttimeout", "none")
    # ssh's default: no keepalives, or every 300 s in BatchMode (readconf.c fill_default_options)
    out.setdefault("serveraliveinterval", "300" if str(out.get("batchmode", "")).lower() in ("yes", "true") else "0")
    for key in ("proxycommand", "proxyjump"):
        if str(out.get(key, "")).lower() == "none":
            out.pop(key)
    from devenv.remote import algorithms

    for key in algorithms.OPENSSH_DEFAULTS:    # final lists, as ssh -G prints them
        out[key] = algorithms.resolve(key, _word(out, key))
    tokens = token_table(hostname=str(out["hostname"]), port=int(str(out["port"])), user=str(out["user"]),
                         original=host, alias=_word(out, "hostkeyalias"))
    out["userknownhostsfile"] = [expand_path(p, tokens, "UserKnownHostsFile") for p in out["userknownhostsfile"]]
    if out.get("identityagent") and str(out["identityagent"]).lower() not in ("none", "ssh_auth_sock"):
        out["identityagent"] = expand_path(str(out["identityagent"]), tokens, "IdentityAgent")
    return out
