"""L3: the click front end. Thin: parse, call a service, render. Errors surface here, once."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import click
from click.utils import make_default_short_help

from devenv import __version__
from devenv.errors import DevenvError

# Every command, the module that defines it (registering it on `main`), and the summary `devenv --help` shows.
# Commands load lazily: `devenv --help` imports none of them (nor paramiko, docker, textual, yaml), and
# `devenv CMD` imports only CMD's module. tests/test_cli_lazy.py keeps these summaries equal to the commands'.
COMMANDS: dict[str, tuple[str, str]] = {
    "cancel": ("run_cmd", "Stop the run ID on HOST: SIGTERM to its whole process tree, SIGKILL after --grace "
                          "seconds."),
    "check": ("check_cmd", "Check HOST before touching it: SSH, OS, disk, Docker, NVIDIA driver, toolkit, CUDA "
                           "and arch compatibility."),
    "code": ("code_cmd", "Open VS Code (Remote-SSH) on the environment's workspace on HOST."),
    "completion": ("completion_cmd", "Print the completion script for SHELL."),
    "compat": ("compat_cmd", "Tell whether a driver, CUDA version, GPU and PyTorch build work together."),
    "down": ("down_cmd", "Stop and remove the environment on HOST. The workspace is kept for the next `up` "
                         "unless --purge."),
    "exec": ("exec_cmd", "Run COMMAND in the environment on HOST (put `--` before it), streaming its output."),
    "gpus": ("gpus_cmd", "Every GPU of HOSTs (profiles, @groups, ssh aliases) in one table: SKU, memory, "
                         "utilisation, who uses it."),
    "hosts": ("hosts_cmd", "Add, list and remove host profiles (optional: every command also takes an ssh "
                           "alias or user@host[:port])."),
    "image": ("image_cmd", "Environment images on hosts."),
    "jupyter": ("jupyter_cmd", "Open a tunnel to the environment's Jupyter on HOST and print its URL (with the "
                               "token) until Ctrl-C."),
    "logs": ("logs_cmd", "Print the environment's log on HOST (with -f, follow it)."),
    "monitor": ("monitor_cmd", "Watch GPUs, processes, logs and environments on HOSTs (default: every host with "
                               "a running environment)."),
    "profiles": ("profiles_cmd", "List, show and validate host and environment profiles."),
    "run": ("run_cmd", "Start COMMAND in the environment on HOST (put `--` before it), detached: it goes on when "
                       "this machine disconnects."),
    "runs": ("run_cmd", "Detached runs of the environment on HOSTs (or an @group): id, name, command, state "
                        "(running, exited N, killed, lost), started, duration, GPUs."),
    "sanity": ("sanity_cmd", "Prove HOST's GPU delivers: matmul rates and memory bandwidth against its SKU, "
                             "repeatable results, and GPT- and ResNet-style training in fp32, TF32, "
                             "fp16 + GradScaler and bf16."),
    "ssh": ("ssh_cmd", "Open a shell inside the environment on HOST (or run COMMAND after --), with OpenSSH."),
    "ssh-config": ("sshconfig_cmd", "Let every ssh tool see devenv's environment entries (one Include line in "
                                    "your ssh config)."),
    "status": ("status_cmd", "Environments on HOSTs (profiles, @groups, ssh aliases or user@host[:port]; default: "
                             "your host profiles and this machine, not the bundled examples), read from the "
                             "hosts themselves."),
    "sync": ("sync_cmd", "Copy LOCAL_DIR (default: here) into the environment's workspace on HOST over its ssh "
                         "entry (rsync)."),
    "tunnel": ("tunnel_cmd", "Forward environment PORTs to this machine's 127.0.0.1 (same port, or LOCAL:PORT as "
                             "ssh -L) until Ctrl-C."),
    "tunnels": ("tunnels_cmd", "List the tunnels held in the background: host, environment, ports, state, since, "
                               "reconnects."),
    "up": ("up_cmd", "Make (or reattach to) the environment on HOST: check, image, container, Jupyter and sshd, "
                     "tunnels."),
}


class SuggestingGroup(click.Group):
    """A group whose unknown command gets "Did you mean ...?" from every command, loaded or not (click offers
    only the loaded ones); exit 2, as every usage error."""

    def resolve_command(self, ctx: click.Context, args: list[str]
                        ) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except click.exceptions.NoSuchCommand as exc:
            import difflib

            exc.possibilities = difflib.get_close_matches(exc.command_name, self.list_commands(ctx))
            raise


class DevenvGroup(SuggestingGroup):
    """Loads each command's module on first use; turns DevenvError into one message + hint + exit code
    (never a traceback for the user)."""

    group_class = SuggestingGroup  # `devenv hosts lst` too

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(self.commands) | set(COMMANDS))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            importlib.import_module(f"devenv.cli.{COMMANDS[cmd_name][0]}")  # its decorator registers it on main
        if os.environ.get("_DEVENV_COMPLETE") and cmd_name in self.commands:  # the shell is completing
            from devenv.cli.completion_cmd import attach_completers

            attach_completers(self.commands[cmd_name])
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's listing, with the summaries of commands not loaded taken from COMMANDS (no import)."""
        names = [n for n in self.list_commands(ctx) if not (n in self.commands and self.commands[n].hidden)]
        if not names:
            return
        limit = formatter.width - 6 - max(len(n) for n in names)
        rows = []
        for name in names:
            command = self.commands.get(name)
            short = (command.get_short_help_str(limit) if command is not None
                     else make_default_short_help(COMMANDS[name][1], limit))
            rows.append((name, short))
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # A NUL cannot come through a real command line (execve's arguments are C strings), only from a caller
        # in-process; os.stat() and friends raise ValueError on one, so it is refused once, here, as bad input.
        if any("\0" in arg for arg in args):
            report_error("an argument holds a NUL character", "pass each value as plain text")
            ctx.exit(2)
        ctx.meta[_ARGS] = list(args)
        try:
            return super().parse_args(ctx, args)
        except click.ClickException as exc:
            exc.message = redact(exc.message, ctx.meta[_ARGS])  # args is consumed by then
            raise

    def invoke(self, ctx: click.Context) -> Any:  # what the command returns, as click.Group.invoke
        from devenv.cli.signals import ending_signals_interrupt

        with ending_signals_interrupt():
            return self._invoke(ctx)

    def _invoke(self, ctx: click.Context) -> Any:
        try:
            from devenv.config.paths import check_devenv_home

            check_devenv_home()  # a command runs (--help ended in parsing): the setting every command reads
            return super().invoke(ctx)
        except DevenvError as exc:
            given = ctx.meta.get(_ARGS, [])
            report_error(redact(exc.message, given), redact(exc.hint, given) if exc.hint else exc.hint)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt as exc:  # Ctrl-C, and SIGTERM / SIGHUP (cli/signals.py)
            from devenv.cli.signals import Stopped, exit_code

            click.echo(f"\nInterrupted{f' ({exc.args[0]})' if isinstance(exc, Stopped) else ''}.", err=True)
            ctx.exit(exit_code(exc))
        except click.ClickException as exc:  # a bad option value: click's message quotes it
            exc.message = redact(exc.message, ctx.meta.get(_ARGS, []))
            raise
        except (click.exceptions.Exit, click.Abort):
            raise
        except Exception as exc:  # an unknown bug: one line for the user, the traceback for us
            if os.environ.get("DEVENV_DEBUG") or "pytest" in sys.modules:
                raise
            report_error(
                f"internal error: {type(exc).__name__}: {exc}",
                "re-run with DEVENV_DEBUG=1 for a traceback, and report it",
            )
            ctx.exit(70)


_ARGS = "devenv.args"


def shown_whole(arg: str) -> bool:
    """Whether an error may repeat this argument as given: a short plain word, or a path (the user needs to see
    which file), never anything multi-line, with control characters or looking like a key."""
    from devenv.config.validate import text_problem

    if text_problem(arg) or "PRIVATE KEY" in arg or "BEGIN " in arg:
        return False
    path_like = arg.startswith(("/", "~", "./", "../")) and not any(c.isspace() for c in arg)
    return len(arg) <= 40 or (path_like and len(arg) <= 1024)


def redact(text: str, args: list[str]) -> str:
    """text with every long, multi-line or control-character argument shown as a short preview: an error
    never repeats a whole value (a private key pasted as an argument, a terminal escape)."""
    from devenv.config.validate import preview, text_problem

    for arg in sorted(set(args), key=len, reverse=True):
        if shown_whole(arg):
            continue
        shown = preview(arg)
        for form in (repr(arg), repr(arg)[1:-1], arg):
            if len(form) > 2 or (form and text_problem(form)):  # a lone control character too
                text = text.replace(form, shown)
    return text


def report_error(message: str, hint: str | None) -> None:
    color = False if os.environ.get("NO_COLOR") else None  # the command's context may be gone by now
    click.secho(f"Error: {message}", fg="red", err=True, color=color)
    if hint:
        click.secho(f"Hint: {hint}", fg="yellow", err=True, color=color)


@click.group(cls=DevenvGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="devenv")
@click.option("-v", "--verbose", is_flag=True,
              help="Log each remote command (exit code, duration) and each reconnect to stderr; also DEVENV_DEBUG=1.")
def main(verbose: bool) -> None:
    """A ready PyTorch GPU environment on any GPU machine you can SSH into, and proof that it delivers."""
    if os.environ.get("NO_COLOR"):  # https://no-color.org: any non-empty value turns colour off
        click.get_current_context().color = False
    click.get_current_context().meta["devenv.verbose"] = bool(verbose or os.environ.get("DEVENV_DEBUG"))
    if verbose or os.environ.get("DEVENV_DEBUG"):
        from devenv.cli.debug_log import setup_logging

        setup_logging()

