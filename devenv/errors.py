"""Domain errors: raised anywhere, printed once at the edge (CLI or TUI) with their hint."""

from __future__ import annotations

from typing import Protocol


class DevenvError(Exception):
    """A failure the user can act on: a one-line message and a hint saying what to do."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class BadInput(DevenvError):
    """A value given by the user (flag, environment variable, file) cannot be used: exit 2, before connecting."""

    exit_code = 2


class ProfileError(BadInput):
    """A profile is missing, malformed or names an unknown field."""


class NotConfirmed(BadInput):
    """A step that needs the user's yes (recreate an environment, delete a workspace, edit ~/.ssh/config) was not
    confirmed: no terminal to ask on (and no --yes), or the user said no. Exit 2 in every command."""


class ConnectError(DevenvError):
    """The host could not be reached or authenticated (network, key, host key)."""

    exit_code = 3


class HostKeyError(ConnectError):
    """The host's key is unknown or changed: never trusted silently."""


class CommandResult(Protocol):
    """What CommandFailed reports of a command (remote.base.Result; errors is L0 and cannot import it)."""

    @property
    def command(self) -> str: ...
    @property
    def stdout(self) -> str: ...
    @property
    def stderr(self) -> str: ...
    @property
    def exit_code(self) -> int: ...


class CommandFailed(DevenvError):
    """A remote command exited non-zero; carries its Result (like invoke's UnexpectedExit)."""

    def __init__(self, result: CommandResult, hint: str | None = None):
        tail = "\n".join((result.stderr or result.stdout or "").strip().splitlines()[-5:])
        message = f"command failed with exit code {result.exit_code}: {result.command}"
        if tail:
            message += f"\n{tail}"
        super().__init__(message, hint)
        self.result = result


class CommandTimeout(DevenvError):
    """A remote command ran past its timeout."""

    def __init__(self, command: str, timeout: float, host: str = ""):
        where = f" on {host}" if host else ""
        super().__init__(
            f"command timed out after {timeout:g}s{where}: {command}",
            "the host may be overloaded or the connection stalled; try again, or raise the timeout",
        )
        self.command = command
        self.timeout = timeout


class PortTaken(DevenvError):
    """A local port the user named (or a forward needs) is already held on this machine: exit 6, its own class
    (neither bad input nor a host that cannot be reached), as ssh's `bind: Address already in use`."""

    exit_code = 6


class BadInputError(DevenvError):
    """An argument that cannot be used as given (a path outside the workspace, a port that is taken)."""

    exit_code = 2
