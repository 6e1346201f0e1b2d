"""L1 adapters: how devenv reaches a host (SSH via paramiko, or this machine)."""

from devenv.remote.base import Connection, Result

__all__ = ["Connection", "Result"]
