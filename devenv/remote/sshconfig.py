"""Resolve a profile's SSHTarget exactly as OpenSSH would, then describe it as a ResolvedTarget for paramiko.

Where an `ssh` client exists, OpenSSH itself resolves every host and every jump hop (`ssh -G`, see ssh_g);
elsewhere our own parser (sshconfig_parser) produces the same option table. Profile fields act like ssh's
command-line flags, applied *before* the config lookup: user = `-l`, port = `-p`, identity_file = `-i`,
proxy_jump = `-J`, alias+hostname = `-o HostName=`, connect_timeout = `-o ConnectTimeout=`.

A ProxyJump chain "h1,h2" to T is resolved as OpenSSH runs it: T's hop is `ssh -J h1 h2` (the -J overrides
h2's own ProxyJump), and h1 is looked up alone, so only the first hop's own ProxyJump/ProxyCommand is followed.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from devenv.config import paths
from devenv.errors import ConnectError, ProfileError
from devenv.remote import ssh_g
from devenv.remote.ssh_g import Overrides as Overrides  # re-exported: sshconfig's own API
from devenv.remote.ssh_g import SshOptions
from devenv.remote.ssh_tokens import expand_path as expand_path  # re-exported: sshconfig's own API
from devenv.remote.ssh_tokens import expand_tilde as expand_tilde
from devenv.remote.ssh_tokens import expand_tokens as expand_tokens
from devenv.remote.ssh_tokens import local_home as local_home
from devenv.remote.ssh_tokens import local_user as local_user
from devenv.remote.ssh_tokens import token_table as token_table

if TYPE_CHECKING:  # config.profiles is the ssh section's home; imported for its type only (no L0 cycle)
    from devenv.config.profiles import SSHTarget

DEFAULT_CONNECT_TIMEOUT = 15.0   # OpenSSH waits for the OS's TCP timeout (minutes); we prefer a clear error
DEFAULT_ALIVE_INTERVAL = 30.0
# OpenSSH's default identities, in its order, restricted to the key types paramiko supports.
DEFAULT_IDENTITIES = ("~/.ssh/id_rsa", "~/.ssh/id_ecdsa", "~/.ssh/id_ed25519")
# What `ssh -G` lists when no IdentityFile is configured (OpenSSH's full default set).
_OPENSSH_DEFAULT_IDENTITIES = frozenset(f"~/.ssh/id_{k}" for k in
                                        ("rsa", "dsa", "ecdsa", "ecdsa_sk", "ed25519", "ed25519_sk", "xmss"))
_MAX_JUMP_DEPTH = 8
# A host, user or hop as a value: never an option (leading '-'), never whitespace, quotes or a config line.
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_.:%\[\]@+~/=,-]+$")
_SAFE_PATH = re.compile(r"^[^\x00-\x1f\x7f]+$")


@dataclass(frozen=True)
class ResolvedTarget:
    label: str                       # what the user called it (alias or host spec), for messages
    hostname: str
    port: int
    user: str
    identity_files: tuple[str, ...]  # expanded paths; empty = OpenSSH's defaults
    identities_only: bool
    connect_timeout: float
    server_alive_interval: float
    server_alive_count_max: int = 3
    jumps: tuple[ResolvedTarget, ...] = ()   # hops in dialling order, flattened
    proxy_command: str | None = None           # tokens expanded; run as `exec CMD` by the user's shell
    original: str = ""                         # the name as given (%n), for HostKeyAlias-less lookups
    identity_agent: str | None = None          # None: $SSH_AUTH_SOCK; "none": no agent; else a socket path
    certificate_files: tuple[str, ...] = ()
    known_hosts_files: tuple[str, ...] = ()    # UserKnownHostsFile; new keys are recorded in the first
    global_known_hosts_files: tuple[str, ...] = ()
    host_key_alias: str | None = None
    revoked_host_keys: str | None = None
    strict_host_key_checking: str = "ask"      # yes / ask / accept-new / no (as OpenSSH spells them)
    resolved_by: str = "ssh -G"
    options: SshOptions = field(default_factory=dict, compare=False, repr=False)

    @property
    def address(self) -> str:
        host = f"[{self.hostname}]" if ":" in self.hostname else self.hostname
        return f"{host}:{self.port}"

    def describe(self) -> str:
        return f"{self.user}@{self.address}"


def check_name(value: str, what: str) -> str:
    """A host/user/hop value safe to hand to ssh: never an option, never several words or a config line."""
    if not value or value.startswith("-") or not _SAFE_NAME.match(value):
        raise ConnectError(f"invalid {what} '{value}'",
                           f"a {what} is letters, digits and . _ - @ : [ ] (it may not start with '-')")
    return value


def resolve(target: SSHTarget) -> ResolvedTarget:
    """target: a host profile's ssh section."""
    name = target.alias or target.hostname
    if not name:
        raise ConnectError("the host profile's ssh section names neither an alias nor a hostname",
                           "set ssh.hostname (or ssh.alias for a Host in ~/.ssh/config) in the profile")
    hops = [h for h in (target.proxy_jump or ()) if h.strip()]
    overrides = Overrides(
        user=target.user, port=target.port, identity_file=target.identity_file,
        jump=",".join(h.strip() for h in hops) or None,
        hostname=target.hostname if target.alias else None, connect_timeout=target.connect_timeout)
    resolved = _resolve(name, overrides, depth=0, label=name)
    if target.identity_file:
        # Unlike `ssh -i`, the profile's key also serves jump hosts (after their own keys): a profile's
        # proxy_jump hops ("user@host:port") have no other place to name a key.
        own = resolved.identity_files[:1]
        resolved = replace(resolved, jumps=tuple(
            replace(j, identity_files=tuple(dict.fromkeys((*j.identity_files, *own)))) for j in resolved.jumps))
    return resolved


def parse_hop(spec: str) -> tuple[str | None, str, int | None]:
    """'user@host:port', 'host', '[::1]:22' or 'ssh://user@host:port' -> (user, host, port)."""
    text = spec.strip()
    if text.startswith("ssh://"):
        text = text[len("ssh://"):]
    user = None
    if "@" in text:
        user, text = text.rsplit("@", 1)
    port = None
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        if rest.startswith(":"):
            port = _port(rest[1:], spec)
    elif text.count(":") == 1:
        host, port_text = text.split(":")
        port = _port(port_text, spec)
    else:
        host = text
    if not host:
        raise ConnectError(f"bad ProxyJump hop '{spec}'", "write hops as user@host:port or an ssh config alias")
    return user, host, port


def lookup(name: str, ov: Overrides) -> SshOptions:
    """The option table OpenSSH would use for `ssh [overrides] name` (keys lower-case, like `ssh -G`)."""
    check_name(name, "host name")
    if ssh_g.ssh_binary() is not None:
        return ssh_g.query(lookup_args(ov), name, _config_file_arg())
    from devenv.remote import sshconfig_parser
    return sshconfig_parser.lookup(name, ov, _config_file())


def lookup_args(ov: Overrides) -> list[str]:
    args: list[str] = []
    if ov.user:
        args += ["-l", check_name(ov.user, "user name")]
    if ov.port:
        args += ["-p", str(_port(str(ov.port), "the profile"))]
    if ov.identity_file:
        path = os.path.expanduser(ov.identity_file)
        if not _SAFE_PATH.match(path):
            raise ConnectError(f"invalid identity file path {path!r}", "use a plain file path")
        args += ["-i", path]
    if ov.jump:
        for hop in ov.jump.split(","):
            check_name(hop.strip(), "ProxyJump hop")
        args += ["-J", ov.jump]
    if ov.hostname:
        args += ["-o", f"HostName={check_name(ov.hostname, 'host name')}"]
    if ov.connect_timeout:
        args += ["-o", f"ConnectTimeout={max(1, int(round(ov.connect_timeout)))}"]
    return args


def _config_file() -> Path | None:
    """The ssh config to read: $DEVENV_SSH_CONFIG when set (missing = empty), else OpenSSH's own default."""
    env = os.environ.get("DEVENV_SSH_CONFIG")
    if env:
        return paths.expand_home(env, "DEVENV_SSH_CONFIG")
    return None


def _config_file_arg() -> str | None:
    path = _config_file()
    if path is None:
        return None
    return str(path) if path.is_file() else "/dev/null"


def _resolve(name: str, ov: Overrides, *, depth: int, label: str) -> ResolvedTarget:
    if depth > _MAX_JUMP_DEPTH:
        raise ConnectError(f"ProxyJump chain for '{name}' is deeper than {_MAX_JUMP_DEPTH} hops (a loop?)",
                           "check the ProxyJump lines in your ssh config")
    opts = lookup(name, ov)
    resolved = from_options(opts, name, label, ov)
    if ov.connect_timeout:  # ssh takes whole seconds; the profile's value is kept exactly
        resolved = replace(resolved, connect_timeout=float(ov.connect_timeout))
    jump = str(opts.get("proxyjump") or "")
    if jump and jump.lower() != "none":
        hops = [h.strip() for h in jump.split(",") if h.strip()]
        given = [h.strip() for h in (ov.jump or "").split(",") if h.strip()]
        labels = given if len(given) == len(hops) else hops  # ssh -G prints -J hops normalised
        user, host, port = parse_hop(hops[-1])
        hop = _resolve(host, Overrides(user=user, port=port, jump=",".join(hops[:-1]) or None),
                       depth=depth + 1, label=labels[-1])
        resolved = replace(resolved, proxy_command=None, jumps=(*hop.jumps, replace(hop, jumps=())))
    return resolved


def from_options(opts: SshOptions, name: str, label: str, ov: Overrides | None = None) -> ResolvedTarget:
    """Build a ResolvedTarget from an `ssh -G`-style option table, expanding the tokens ssh -G leaves."""
    hostname = str(opts.get("hostname") or name)
    port = _port(str(opts.get("port") or "22"), f"Port for {name}")
    user = str(opts.get("user") or local_user())
    alias = _none(opts.get("hostkeyalias"))
    tokens = token_table(hostname=hostname, port=port, user=user, original=name, alias=alias)
    identities = [expand_path(p, tokens, "IdentityFile") for p in _list(opts.get("identityfile"))
                  if p.lower() != "none"]
    if set(_list(opts.get("identityfile"))) <= _OPENSSH_DEFAULT_IDENTITIES:
        identities = []  # nothing configured: OpenSSH's defaults (auth tries those that exist)
    proxy_command = _none(opts.get("proxycommand"))
    if proxy_command:
        proxy_command = expand_tokens(proxy_command, tokens, "ProxyCommand", allowed="%hnpr")
    # IdentityAgent and UserKnownHostsFile come expanded (ssh -G expands them, and so does our parser): a '%'
    # or '${' left in them is part of the name ssh uses, never expanded twice
    agent = _none(opts.get("identityagent"), keep_none=True)
    if agent and agent.startswith("$") and not agent.startswith("${"):
        agent = os.environ.get(agent[1:]) or "none"  # "$VAR": the variable holds the socket's path
    elif agent and agent.lower() == "ssh_auth_sock":
        agent = None
    elif agent and agent.lower() != "none":
        agent = expand_tilde(agent, "IdentityAgent")  # as for UserKnownHostsFile below
    revoked = _none(opts.get("revokedhostkeys"))
    _refuse_what_devenv_cannot_do(opts, label)
    return ResolvedTarget(
        label=label, hostname=hostname, port=port, user=user,
        identity_files=tuple(dict.fromkeys(identities)),
        identities_only=_yes(opts.get("identitiesonly")),
        connect_timeout=_seconds(opts.get("connecttimeout"), DEFAULT_CONNECT_TIMEOUT),
        server_alive_interval=_seconds(opts.get("serveraliveinterval"), DEFAULT_ALIVE_INTERVAL),
        server_alive_count_max=int(_seconds(opts.get("serveralivecountmax"), 3)),
        proxy_command=proxy_command,
        original=name,
        identity_agent=agent.lower() if agent and agent.lower() == "none" else agent,
        certificate_files=tuple(expand_path(p, tokens, "CertificateFile")
                                for p in _list(opts.get("certificatefile")) if p.lower() != "none"),
        known_hosts_files=_known_hosts_files(opts),
        # OpenSSH 9.2 expands only ~ in GlobalKnownHostsFile, and nothing at all in RevokedHostKeys
        global_known_hosts_files=tuple(expand_tilde(p, "GlobalKnownHostsFile")
                                       for p in file_list(opts.get("globalknownhostsfile"))
                                       if p.lower() != "none"),
        host_key_alias=alias,
        revoked_host_keys=revoked,
        strict_host_key_checking=_strict(opts.get("stricthostkeychecking")),
        resolved_by="ssh -G" if ssh_g.ssh_binary() else "devenv's ssh config parser",
        options=dict(opts),
    )


# Options that change how ssh reaches a host and that devenv cannot follow: (option, the values that do,
# what ssh would do, the hint). Said before dialling, never ignored.
_CANNOT_FOLLOW = (
    ("ProxyUseFdpass", ("yes", "true"), "a ProxyCommand that hands back a connected socket",
     "drop ProxyUseFdpass for {label} (its ProxyCommand must then relay the connection), or use ProxyJump"),
    ("BindInterface", None, "binding the connection to a network interface",
     "drop BindInterface for {label}, or set BindAddress to that interface's address (devenv follows it)"),
)


def _refuse_what_devenv_cannot_do(opts: SshOptions, label: str) -> None:
    """devenv logs in with keys only: where the ssh config keeps ssh from offering keys at all, connecting with
    them anyway would not be what ssh does; nor would ignoring an option of _CANNOT_FOLLOW. Both are refused
    before anything is dialled."""
    if str(opts.get("pubkeyauthentication") or "yes").lower() in ("no", "false"):
        raise ProfileError(f"the ssh config for {label} sets PubkeyAuthentication no, and devenv logs in with "
                           "SSH keys only", f"allow keys for {label} in your ssh config (remove PubkeyAuthentication"
                           " no, or set it yes in an earlier Host block); nothing was dialled")
    preferred = _none(opts.get("preferredauthentications"))
    if preferred and "publickey" not in preferred.split(","):
        raise ProfileError(f"the ssh config for {label} sets PreferredAuthentications {preferred}, without "
                           "publickey, and devenv logs in with SSH keys only",
                           f"add publickey to PreferredAuthentications for {label} in your ssh config; "
                           "nothing was dialled")
    for option, values, what, hint in _CANNOT_FOLLOW:
        given = _none(opts.get(option.lower()))
        if given and (values is None or given.lower() in values):
            raise ProfileError(f"the ssh config for {label} sets {option} {given}: devenv does not support {what}",
                               hint.format(label=label) + "; nothing was dialled")


def _known_hosts_files(opts: SshOptions) -> tuple[str, ...]:
    """UserKnownHostsFile's files; () for `none` (no user file at all: only the global ones, as ssh)."""
    words = file_list(opts.get("userknownhostsfile"))
    if words and all(w.lower() == "none" for w in words):
        return ()
    # expanded already (by ssh -G, or our parser); only a ~ is expanded here, for an older ssh
    # whose -G printed it as written (9.2 never prints a leading ~)
    files = [expand_tilde(p, "UserKnownHostsFile") for p in words if p.lower() != "none"]
    defaults = {os.path.join(local_home(), ".ssh", n) for n in ("known_hosts", "known_hosts2")}
    override = os.environ.get("DEVENV_KNOWN_HOSTS")
    if override and (not files or set(files) <= defaults):
        return (str(paths.expand_home(override, "DEVENV_KNOWN_HOSTS")),)
    if not files:
        return (os.path.join(local_home(), ".ssh", "known_hosts"),)
    return tuple(files)


def file_list(value: object) -> list[str]:
    """A file-list option's paths: a list from devenv's parser, which read the config's quotes; from `ssh -G`
    a line of paths joined by single spaces, so that a path holding a space comes back in pieces. Every path
    ssh -G prints there is expanded (absolute; ~ from an older ssh) or `none`: a piece that starts otherwise
    continues the path before it ("/a/my dir/kh" is one path)."""
    if isinstance(value, list):
        return [str(v) for v in value]
    paths: list[str] = []
    for piece in str(value or "").strip().split(" "):
        if paths and not piece.startswith(("/", "~")) and piece.lower() != "none":
            paths[-1] += " " + piece
        elif piece:
            paths.append(piece)
    return paths


# --- small parsers -------------------------------------------------------------------------------------

def _list(value: object) -> list[str]:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [str(value)]


def _none(value: object, keep_none: bool = False) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    if not text or (text.lower() == "none" and not keep_none):
        return None
    return text


def _yes(value: object) -> bool:
    return str(value or "").lower() in ("yes", "true")


def _strict(value: object) -> str:
    text = str(value or "ask").lower()
    return {"true": "yes", "false": "no", "off": "no"}.get(text, text)


def _port(text: str, what: str) -> int:
    if not str(text).isdigit() or not 0 < int(text) < 65536:
        raise ConnectError(f"bad port '{text}' in {what}", "a port is a number from 1 to 65535")
    return int(text)


def _seconds(text: object, default: float) -> float:
    try:
        value = float(str(text)) if text and str(text).lower() != "none" else default
    except ValueError:
        return default
    return value if value > 0 else default
