"""Changes of this machine's network, as the kernel announces them (L1): a NETLINK_ROUTE socket subscribed to
link, address and route changes (Linux only; no dependency). A held tunnel that is reconnecting waits on it
beside its back-off, so that it tries again the moment a link comes up or an address or route appears (the
Wi-Fi joined, the cable back), instead of at the back-off's next tick. Elsewhere open_watch() is None and
the back-off alone decides.

Only "something changed" is read from a message, never its content: the next attempt finds out whether the
host can be reached."""

from __future__ import annotations

import socket

# rtnetlink multicast groups (linux/rtnetlink.h): links, IPv4/IPv6 addresses and routes
RTMGRP_LINK = 0x1
RTMGRP_IPV4_IFADDR = 0x10
RTMGRP_IPV4_ROUTE = 0x40
RTMGRP_IPV6_IFADDR = 0x100
RTMGRP_IPV6_ROUTE = 0x400
GROUPS = RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_IFADDR | RTMGRP_IPV6_ROUTE


class NetworkWatch:
    """A non-blocking rtnetlink socket: fileno() is readable once the network changed; changed() reads (and
    forgets) what is pending, and says whether there was anything."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_NETLINK,  # type: ignore[attr-defined,unused-ignore]  # Linux only
                                   socket.SOCK_RAW | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC,
                                   socket.NETLINK_ROUTE)  # type: ignore[attr-defined,unused-ignore]
        try:
            self._sock.bind((0, GROUPS))
        except OSError:
            self._sock.close()
            raise

    def fileno(self) -> int:
        return self._sock.fileno()

    def changed(self) -> bool:
        seen = False
        while True:
            try:
                if not self._sock.recv(65536):
                    return seen
            except BlockingIOError:
                return seen
            except OSError:   # ENOBUFS: more changes than the buffer held; a change all the same
                seen = True
                continue
            seen = True

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> NetworkWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_watch() -> NetworkWatch | None:
    """A watch of this machine's network changes, or None where there is none (not Linux, no permission)."""
    if not hasattr(socket, "AF_NETLINK") or not hasattr(socket, "NETLINK_ROUTE"):
        return None
    try:
        return NetworkWatch()
    except OSError:
        return None
