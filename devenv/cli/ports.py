"""Local ports the user named: used as asked, or refused with a hint; never silently swapped for another."""

from __future__ import annotations


def require_free(port: int, flag: str) -> int:
    """port when a forward could listen on it now (TIME_WAIT counts as free, as for ssh); else PortTaken
    (exit 6: automatic ports are for unnamed ones)."""
    from devenv.remote.tunnels import port_is_free, port_taken_error

    if not port_is_free(port):
        raise port_taken_error(port, flag)
    return port
