"""The environment as the user's own ssh tools reach it (sync, code, exec with stdin): entry and workspace.

A container environment is reached through the entry `devenv ssh` writes (devenv's ssh config, alias
devenv-HOST-ENV); an environment on the bare host through the host's own ssh; one on this machine directly.
"""

from __future__ import annotations

import os
import shutil

from devenv.config.profiles import EnvProfile, HostProfile
from devenv.errors import DevenvError
from devenv.remote import openssh
from devenv.remote.rsync import Target
from devenv.services.environments.contract import Shell
from devenv.services.session import EnvSession, open_env


def ssh_binary() -> str:
    found = shutil.which("ssh")
    if not found:
        raise DevenvError("OpenSSH's `ssh` is not installed on this machine",
                          "install openssh-client (apt install openssh-client)")
    return found


def keepalive_options(conn: object) -> list[str]:
    """`-o ServerAliveInterval/CountMax` as devenv's own connection to the host uses them (the user's ssh config
    for the host, or devenv's default): the user's ssh then notices a frozen connection as soon as devenv would,
    anywhere on the way to the environment, instead of after the entry's own 30 s x 3 or never."""
    from devenv.remote.ssh_pipe import keepalive_options as options

    return options(conn)


def env_target(host: str, env: str | None, accept_new_host: bool) -> tuple[HostProfile, EnvProfile, Target]:
    """(host, env, where its workspace is) for a running environment; its ssh entry is written fresh."""
    with open_env(host, env, accept_new_host=accept_new_host) as session:
        return session.host, session.env, session_target(session)


def session_target(session: EnvSession) -> Target:
    """Where the session's running environment and its workspace are, for the user's ssh tools."""
    from devenv.services.ssh_entry import ssh_files

    env_profile, host_profile, host = session.env, session.host, session.host.name
    alive = keepalive_options(session.conn)
    shell = session.kind.shell
    if shell is Shell.HOST:  # the environment is the host: its workspace folder there
        if session.backend.find(env_profile.name) is None:
            raise DevenvError(f"no environment '{env_profile.name}' on {host}", f"start it: devenv up {host}")
        workspace = session.backend.workspace(env_profile)
        if host_profile.local:
            return Target((), None, os.path.expanduser(workspace))
        options = openssh.host_options(host_profile)
        # ssh lands in the user's home: the workspace relative to it, so no remote `~` is needed
        return Target((ssh_binary(), *alive, *options[:-1]), options[-1], workspace.removeprefix("~/"))
    if shell is Shell.NONE:
        raise DevenvError(f"sync and code reach environments with a shell; {host} runs "
                          f"'{host_profile.runtime}' ({session.traits.environment}), which has none",
                          "use `devenv exec` there")
    alias, _ = session.ssh_alias()
    workspace = session.backend.workspace(env_profile)
    if alias is None:
        raise DevenvError(f"the environment '{env_profile.name}' on {host} has no sshd of its own",
                          "set `sshd: true` in its profile and run `devenv up` again")
    config, _ = ssh_files()
    return Target((ssh_binary(), *alive, "-F", str(config)), alias, workspace)
