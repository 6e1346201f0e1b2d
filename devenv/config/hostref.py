"""What a host named on the command line means, so no YAML is needed to start (L0: no I/O but profiles).

    a100-box            a host profile of that name, if there is one
    @lab                every host profile whose `groups:` lists lab
    gpu1                otherwise an ssh destination: an alias from ~/.ssh/config, or a plain host name
    me@10.0.0.7:2222    user@host[:port] (also [v6-addr]:port)

A destination becomes a HostProfile with the bundled defaults: runtime `auto` (Docker if the host has it,
else the bare host; decided once connected, see services.host_runtime), default_env `cuda`, python3.
Bundled example profiles (remote ones such as a100-box) are examples: `status` does not ask them unless named.
"""

from __future__ import annotations

import re

from devenv.config import paths, profiles, validate
from devenv.config.profiles import HostProfile, RuntimeKind, SSHTarget
from devenv.errors import ProfileError

GROUP_PREFIX = "@"
_USER = r"[A-Za-z0-9._][A-Za-z0-9._-]{0,63}"
_HOST = r"[A-Za-z0-9_][A-Za-z0-9._-]{0,252}"
_DEST = re.compile(rf"^(?:(?P<user>{_USER})@)?(?:\[(?P<v6>[0-9A-Fa-f:.%]+)\]|(?P<host>{_HOST}))"
                   rf"(?::(?P<port>[0-9]{{1,5}}))?$")


def is_group(name: str) -> bool:
    return name.startswith(GROUP_PREFIX)


def group_members(group: str) -> list[str]:
    """Host profile names in a group ('@lab' or 'lab'), in name order; an empty or unknown group is an error."""
    wanted = group.removeprefix(GROUP_PREFIX)
    if not wanted:
        raise ProfileError("'@' names no group", "write @GROUP, a group listed under `groups:` in host profiles")
    members: list[str] = []
    known: set[str] = set()
    for name in profiles.names("hosts"):
        try:
            host = profiles.load_host(name)
        except ProfileError:
            continue  # a broken profile is reported when it is named, not when a group is expanded
        known.update(host.groups)
        if wanted in host.groups:
            members.append(name)
    if not members:
        raise ProfileError(f"no host profile is in group '{wanted}'",
                           f"known groups: {', '.join(sorted(known)) or 'none'}; add `groups: [{wanted}]` to "
                           "host profiles (devenv hosts add NAME --group " + wanted + ")")
    return members


def expand(names: list[str] | tuple[str, ...]) -> list[str]:
    """Names with every @group replaced by its members (order kept, duplicates dropped)."""
    out: list[str] = []
    for name in names:
        for member in group_members(name) if is_group(name) else [name]:
            if member not in out:
                out.append(member)
    return out


NO_PROFILE = "ssh destination (no profile)"  # the source of a host named without a profile


def load_host(name: str) -> HostProfile:
    """A host profile, or the profile an ssh destination implies (see the module's docstring)."""
    if is_group(name):
        raise ProfileError(f"'{name}' is a group; this command takes one host",
                           f"name one of: {', '.join(group_members(name))}")
    if profiles.source_of("hosts", name) is not None:
        return profiles.load_host(name)
    return destination_profile(name)


def destination_profile(name: str) -> HostProfile:
    """`alias`, `host`, `user@host` or `user@host:port` as a HostProfile with the bundled defaults."""
    match = _DEST.match(name or "")
    host_part = (match.group("v6") or match.group("host")) if match else ""
    if not match or name.startswith("-") or any(len(label) > 63 for label in host_part.split(".")):
        raise ProfileError(
            f"{validate.preview(name, 40)} is neither a host profile nor an ssh destination",
            "name a host profile (devenv profiles list), an alias from ~/.ssh/config, or user@host[:port]")
    user, host, port = match.group("user"), match.group("v6") or match.group("host"), match.group("port")
    if port is not None and not 0 < int(port) < 65536:
        raise ProfileError(f"bad port in '{name}'", "a port is a number from 1 to 65535")
    if user is None and port is None and match.group("v6") is None:
        target = SSHTarget(alias=host)  # ssh -G resolves it: a config alias, or the plain name
    else:
        target = SSHTarget(hostname=host, user=user, port=int(port) if port else None)
    return HostProfile(name=name, source=NO_PROFILE, ssh=target, runtime=RuntimeKind.AUTO,
                       description="reached as `ssh " + name + "` would")


def is_example(host: HostProfile) -> bool:
    """A bundled remote profile: shown as an example, asked only when named."""
    bundled = paths.bundled_dir("profiles") / "hosts"
    return not host.local and host.source.startswith(str(bundled))


def default_status_hosts() -> list[str]:
    """What `status` asks with no names: the user's host profiles and the bundled local one, not examples."""
    names = []
    for name in profiles.names("hosts"):
        try:
            host = profiles.load_host(name)
        except ProfileError:
            names.append(name)  # its error is reported for that host
            continue
        if not is_example(host):
            names.append(name)
    return names


def new_profile_text(name: str, destination: str | None, runtime: str, groups: list[str],
                     description: str = "", default_env: str | None = None) -> str:
    """The YAML of a new host profile (validated by parsing it back; values never become extra YAML)."""
    import yaml

    if not profiles._NAME_RE.match(name or "") or is_group(name):
        raise ProfileError(f"'{name}' is not a valid host profile name", "use letters, digits, '.', '_' and '-'")
    target = destination_profile(destination or name).ssh
    assert target is not None
    ssh = {k: v for k, v in (("alias", target.alias), ("hostname", target.hostname), ("user", target.user),
                             ("port", target.port)) if v is not None}
    for group in groups:
        if not profiles._NAME_RE.match(group):
            raise ProfileError(f"'{group}' is not a valid group name", "use letters, digits, '.', '_' and '-'")
    data: dict[str, object] = {"description": description or f"added with `devenv hosts add {name}`", "ssh": ssh,
                  "runtime": runtime}
    if groups:
        data["groups"] = list(dict.fromkeys(groups))
    if default_env is not None:
        profiles.load_env(default_env)  # an environment that exists (a profile), or the error naming the known
        data["default_env"] = default_env
    text = yaml.safe_dump(data, sort_keys=False)
    profiles.parse_host(text, name, f"new profile {name}")  # the same validation as every profile
    return text
