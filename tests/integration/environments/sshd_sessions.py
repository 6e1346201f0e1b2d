"""The test host's per-connection sshd processes that serve one client process's SSH connection: found by the
TCP port pair (the client's socket to sshd's port), so a fault test stops or kills exactly devenv's own session
and never another test's. A helper module (tests/integration/environments is on sys.path through its conftest).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path


def _socket_inodes(pid: int) -> set[int]:
    inodes = set()
    try:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(int(target[8:-1]))
    except OSError:
        pass
    return inodes


def _tcp_table() -> dict[int, tuple[int, int]]:
    """socket inode -> (local port, remote port) for IPv4 and IPv6 TCP sockets of this machine."""
    table = {}
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, remote, inode = fields[1], fields[2], int(fields[9])
            table[inode] = (int(local.rsplit(":", 1)[1], 16), int(remote.rsplit(":", 1)[1], 16))
    return table


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        kids.setdefault(ppid, []).append(int(stat.parent.name))
    return kids


def _descendants(pid: int, kids: dict[int, list[int]]) -> list[int]:
    found, todo = [], list(kids.get(pid, []))
    while todo:
        child = todo.pop()
        found.append(child)
        todo.extend(kids.get(child, []))
    return found


def client_ports(client_pid: int, server_port: int) -> set[int]:
    """The local ports of client_pid's (and its children's) TCP connections to server_port."""
    table = _tcp_table()
    pids = [client_pid, *_descendants(client_pid, _children())]
    return {table[i][0] for pid in pids for i in _socket_inodes(pid) if i in table and table[i][1] == server_port}


def serving(listener_pid: int, server_port: int, client_pid: int) -> list[int]:
    """The sshd processes (under the listener) holding a socket of client_pid's connections to server_port."""
    ports = client_ports(client_pid, server_port)
    table = _tcp_table()
    found = []
    for pid in _descendants(listener_pid, _children()):
        try:
            if not Path(f"/proc/{pid}/comm").read_text().startswith("sshd"):
                continue
        except OSError:
            continue
        if any(table.get(i, (0, 0))[0] == server_port and table[i][1] in ports for i in _socket_inodes(pid)):
            found.append(pid)
    return found


def listener_pid(testhost) -> int:
    return int((testhost.dir / "sshd.pid").read_text().split()[0])


def signal_all(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
