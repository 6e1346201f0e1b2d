"""`devenv completion bash|zsh|fish`: the shell's completion script; host, @group and env names complete.

Completion is click's own (the script calls devenv back with _DEVENV_COMPLETE set); the names come from the
profiles on this machine, never from a host (completing must not connect anywhere). Every command's HOST /
HOSTS argument and --env option get the completers here, so commands need not know about completion.
"""

from __future__ import annotations

import click
from click.shell_completion import CompletionItem, get_completion_class

from devenv.cli import main

SHELLS = ("bash", "zsh", "fish")


def host_names() -> list[str]:
    """Host profile names, @groups (bundled examples included: they are valid names too) and the Host names of
    your ssh config."""
    from devenv.config import profiles

    names, groups = list(profiles.names("hosts")), set[str]()
    for name in names:
        try:
            groups.update(profiles.load_host(name).groups)
        except Exception:  # a broken profile must not break the user's shell
            continue
    from devenv.config.ssh_hosts import ssh_aliases

    aliases = [a for a in ssh_aliases() if a not in names]  # any ssh alias is a host too
    return names + [f"@{g}" for g in sorted(groups)] + aliases


def env_names() -> list[str]:
    from devenv.config import profiles, project_envs

    names = list(profiles.names("envs"))
    return names + [n for n in project_envs.names() if n not in names]  # projects' own environments too


def complete_hosts(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    try:
        return [CompletionItem(n) for n in host_names() if n.startswith(incomplete)]
    except Exception:
        return []


def complete_envs(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    try:
        return [CompletionItem(n) for n in env_names() if n.startswith(incomplete)]
    except Exception:
        return []


def attach_completers(command: click.Command) -> None:
    """HOST/HOSTS arguments and --env options of a command (and its sub-commands) complete names."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            attach_completers(sub)
    for param in command.params:
        if param.name in ("host", "hosts") and isinstance(param, click.Argument):
            param._custom_shell_complete = complete_hosts
        elif param.name == "env" and isinstance(param, click.Option):
            param._custom_shell_complete = complete_envs


@main.command()
@click.argument("shell", type=click.Choice(SHELLS))
def completion(shell: str) -> None:
    """Print the completion script for SHELL.

    \b
    bash:  echo 'eval "$(devenv completion bash)"' >> ~/.bashrc
    zsh:   echo 'eval "$(devenv completion zsh)"' >> ~/.zshrc
    fish:  devenv completion fish > ~/.config/fish/completions/devenv.fish
    """
    cls = get_completion_class(shell)
    assert cls is not None  # the three shells are click's own
    click.echo(cls(main, {}, "devenv", "_DEVENV_COMPLETE").source())
