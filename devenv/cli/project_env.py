"""`up` with a project's devcontainer: the project's own environment, named after it (config.project_envs).

Without --env, `up` in a project with a devcontainer.json makes the environment `<project>` on the default
environment ($DEVENV_ENV, else the host's), so another project's environment on the same host is never offered for
replacement. `--env <project>` names it later from anywhere, and `up --env <project>` finds its devcontainer.json
again. An environment profile named with --env is used as named (the devcontainer laid over it)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import click

from devenv.config import profiles, project_envs
from devenv.env.devcontainer import Devcontainer
from devenv.services.session import EnvSession


def remembered_source(env_flag: str | None) -> str | None:
    """The devcontainer.json of the project environment --env names (None: not a project's)."""
    name = env_flag
    if not name or name in profiles.names("envs"):
        return None
    project = project_envs.lookup(name)
    return project.source if project is not None else None


def own_env(session: EnvSession, env_flag: str | None, dc: Devcontainer, root: Path) -> None:
    """Give the session the project's own environment name (unless an environment profile was named), and
    remember it so `--env NAME` works in every command."""
    named = env_flag
    if named and named in profiles.names("envs"):
        return  # a profile the user chose: the devcontainer over it, under its name
    if named:  # a project environment by name: resolve_env gave its base under that name
        project = project_envs.lookup(named)
        base = project.base if project is not None else session.env.name
        name = named
    else:
        base = session.env.name
        name = project_envs.name_for(root, dc.name, set(profiles.names("envs")))
        session.env = replace(session.env, name=name)
        click.echo(f"Project {root.name}: its own environment '{name}' (on '{base}'; "
                   f"`--env {name}` names it in every command)", err=True)
    project_envs.remember(project_envs.ProjectEnv(name, base, dc.source if Path(dc.source).is_absolute()
                                                  else str(Path(dc.source).resolve()), str(root)))
