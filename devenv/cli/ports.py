"""Local ports the user named: used as asked, or refused with a hint; never silently swapped for another."""

from __future__ import annotations

from devenv.errors import BadInputError


def require_free(port: int, flag: str) -> int:
    """port when nothing on this machine listens on it; else bad input (automatic ports are for unnamed ones)."""
    from devenv.remote.tunnels import port_is_free

    if not port_is_free(port):
        raise BadInputError(f"local port {port} ({flag}) is already in use on this machine",
                            f"free it (`ss -ltnp 'sport = :{port}'` shows who holds it), name another {flag}, "
                            "or leave it out to get a free port")
    return port
