"""The environment as the user's own ssh tools reach it (sync, code): its ssh entry, refreshed, and workspace.

A container environment is reached through the entry `devenv ssh` writes (devenv's ssh config, alias
devenv-HOST-ENV); an environment on the bare host through the host's own ssh; one on this machine directly.
"""

from __future__ import annotations

import shutil

from devenv.cli.common import connect, load_host, resolve_env
from devenv.cli.envcommon import open_provisioner
from devenv.config.profiles import EnvProfile, HostProfile
from devenv.errors import DevenvError
from devenv.remote import openssh
from devenv.remote.rsync import Target
from devenv.runtimes.factory import settle


def ssh_binary() -> str:
    found = shutil.which("ssh")
    if not found:
        raise DevenvError("OpenSSH's `ssh` is not installed on this machine",
                          "install openssh-client (apt install openssh-client)")
    return found


def env_target(host: str, env: str | None, accept_new_host: bool) -> tuple[HostProfile, EnvProfile, Target]:
    """(host, env, where its workspace is) for a running environment; its ssh entry is written fresh."""
    from devenv.cli.ssh_cmd import ssh_files, write_env_entry

    host_profile = load_host(host)
    env_profile = resolve_env(host_profile, env)
    conn = connect(host_profile, accept_new_host)
    host_profile = settle(host_profile, conn)
    with open_provisioner(host_profile, conn) as (prov, key):
        if host_profile.runtime == "host":
            workspace = prov.runtime.workspace(env_profile.name)
            if prov.find(env_profile.name) is None:
                raise DevenvError(f"no environment '{env_profile.name}' on {host}", f"start it: devenv up {host}")
            if host_profile.local:
                return host_profile, env_profile, Target((), None, _expand_home(workspace))
            options = openssh.host_options(host_profile)
            # ssh lands in the user's home: the workspace relative to it, so no remote `~` is needed
            return host_profile, env_profile, Target((ssh_binary(), *options[:-1]), options[-1],
                                                     workspace.removeprefix("~/"))
        if host_profile.runtime != "docker" or key is None:
            raise DevenvError(f"sync and code reach container and bare-host environments; {host} runs "
                              f"'{host_profile.runtime}'", "use `devenv exec` there")
        port, host_key = prov.ssh_target(env_profile.name)
    alias = write_env_entry(host_profile, env_profile.name, port, host_key, key.private_path)
    config, _ = ssh_files()
    workspace = env_profile.volumes.get("workspace", "/workspace")
    return host_profile, env_profile, Target((ssh_binary(), "-F", str(config)), alias, workspace)


def _expand_home(path: str) -> str:
    import os

    return os.path.expanduser(path)
