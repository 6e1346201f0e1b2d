"""The script devenv sends for a remote command, and the one that stops it (channel_io.py says why the pgid tag).

No SSH library here: the OpenSSH pipe (ssh_pipe.py) wraps its commands the same way without loading paramiko.
"""

from __future__ import annotations

import shlex

from devenv.env.procgroup import GROUP_ALIVE

PGID_TAG = b"devenv-pgid:"


def wrap_command(command: str, env: dict[str, str] | None) -> str:
    """The script sent to the remote login shell: pgid tag, `export` lines, then the command."""
    lines = [f'echo "{PGID_TAG.decode()}$$" >&2']
    for key, value in (env or {}).items():
        if not key.isidentifier():
            raise ValueError(f"bad environment variable name: {key!r}")
        lines.append(f"export {key}={shlex.quote(value)}")
    lines.append(command)
    return "\n".join(lines)


def stop_script(pgid: int) -> str:
    """TERM the command's process group, give it 2 s, then KILL what is left (zombies are not waited for)."""
    return (f"{GROUP_ALIVE}kill -TERM -- -{pgid} 2>/dev/null || exit 0; i=0; "
            f"while group_alive {pgid} && [ $i -lt 20 ]; do sleep 0.1; i=$((i+1)); done; "
            f"group_alive {pgid} && kill -KILL -- -{pgid} 2>/dev/null; exit 0")
