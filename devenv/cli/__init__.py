"""L3: the click front end. Thin: parse, call a service, render. Errors surface here, once."""

from __future__ import annotations

import os
import sys

import click

from devenv import __version__
from devenv.errors import DevenvError


class DevenvGroup(click.Group):
    """Turns DevenvError into one message + hint + exit code; never a traceback for the user."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except DevenvError as exc:
            report_error(exc.message, exc.hint)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("\nInterrupted.", err=True)
            ctx.exit(130)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except Exception as exc:  # an unknown bug: one line for the user, the traceback for us
            if os.environ.get("DEVENV_DEBUG") or "pytest" in sys.modules:
                raise
            report_error(
                f"internal error: {type(exc).__name__}: {exc}",
                "re-run with DEVENV_DEBUG=1 for a traceback, and report it",
            )
            ctx.exit(70)


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
    if verbose or os.environ.get("DEVENV_DEBUG"):
        from devenv.cli.debug_log import setup_logging

        setup_logging()


# Each command lives in its own module and registers itself on `main`.
from devenv.cli import (  # noqa: E402
    check_cmd,  # noqa: E402,F401
    code_cmd,  # noqa: E402,F401
    compat_cmd,  # noqa: E402,F401
    completion_cmd,  # noqa: E402,F401
    down_cmd,  # noqa: E402,F401
    exec_cmd,  # noqa: E402,F401
    hosts_cmd,  # noqa: E402,F401
    image_cmd,  # noqa: E402,F401
    jupyter_cmd,  # noqa: E402,F401
    logs_cmd,  # noqa: E402,F401
    monitor_cmd,  # noqa: E402,F401
    profiles_cmd,  # noqa: E402,F401
    sanity_cmd,  # noqa: E402,F401
    ssh_cmd,  # noqa: E402,F401
    sshconfig_cmd,  # noqa: E402,F401
    status_cmd,  # noqa: E402,F401
    sync_cmd,  # noqa: E402,F401
    tunnel_cmd,  # noqa: E402,F401
    up_cmd,  # noqa: E402,F401
)

completion_cmd.attach_completers(main)  # after every command has registered itself
