"""A host behind a network link that can be taken away (a helper module to import, not a conftest): a network
namespace of its own, joined to this machine by a veth pair; `down()` and `up()` take the link away and give it
back, as a laptop's Wi-Fi goes and comes. An sshd started in it (NetnsSSHD) is reached at `there` only through
that link. Needs root (ip netns); everything is removed at exit.

    with NetnsLink() as link, NetnsSSHD(tmp / "sshd", link, authorized_keys=[key.public]) as server:
        ...  # ssh root@{link.there} -p {server.port}
        link.down(); link.up()      # or link.drop(); link.undrop(): link up, every packet dropped
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
from pathlib import Path

from sshd_fixture import SSHD


def ip(*argv: str) -> None:
    subprocess.run(["ip", *argv], check=True, capture_output=True, timeout=30)


class NetnsLink:
    def __init__(self) -> None:
        tag = f"{os.getpid() % 10000}{random.randrange(100)}"
        self.netns, self.outer, self.inner = f"dvt{tag}", f"dvt{tag}o", f"dvt{tag}i"
        block = random.randrange(0, 16384) * 4     # a /30 of 10.213.0.0/16: ours alone on this machine
        self.here = f"10.213.{block // 256}.{block % 256 + 1}"
        self.there = f"10.213.{block // 256}.{block % 256 + 2}"

    def __enter__(self) -> NetnsLink:
        ip("netns", "add", self.netns)
        try:
            ip("link", "add", self.outer, "type", "veth", "peer", "name", self.inner)
            ip("link", "set", self.inner, "netns", self.netns)
            ip("addr", "add", f"{self.here}/30", "dev", self.outer)
            ip("link", "set", self.outer, "up")
            ip("-n", self.netns, "addr", "add", f"{self.there}/30", "dev", self.inner)
            ip("-n", self.netns, "link", "set", self.inner, "up")
            ip("-n", self.netns, "link", "set", "lo", "up")
        except BaseException:
            self.__exit__()
            raise
        return self

    def down(self) -> None:
        ip("link", "set", self.outer, "down")

    def up(self) -> None:
        ip("link", "set", self.outer, "up")

    # The other way a network goes: the link stays up, every packet is lost (a captive portal, a dead Wi-Fi
    # access point, a firewall). iptables DROP rules inside the namespace only: no other traffic is touched.
    _DROP = (("INPUT", "-j", "DROP"), ("OUTPUT", "-j", "DROP"))

    def drop(self) -> None:
        for rule in self._DROP:
            subprocess.run(["ip", "netns", "exec", self.netns, "iptables", "-w", "-A", *rule], check=True,
                           capture_output=True, timeout=30)

    def undrop(self) -> None:
        for rule in self._DROP:
            subprocess.run(["ip", "netns", "exec", self.netns, "iptables", "-w", "-D", *rule], check=True,
                           capture_output=True, timeout=30)

    def __exit__(self, *exc: object) -> None:
        subprocess.run(["ip", "link", "del", self.outer], capture_output=True, timeout=30)
        subprocess.run(["ip", "netns", "del", self.netns], capture_output=True, timeout=30)


class NetnsSSHD(SSHD):
    """An SSHD inside the link's namespace, listening on its far address (`there`)."""

    def __init__(self, workdir: Path, link: NetnsLink, **kwargs):
        self.link = link
        super().__init__(workdir, extra_config=f"ListenAddress {link.there}\n" + kwargs.pop("extra_config", ""),
                         **kwargs)

    def start(self) -> SSHD:
        real_popen = subprocess.Popen

        def in_netns(argv, *args, **kwargs):  # the one Popen SSHD.start makes: sshd's
            return real_popen(["ip", "netns", "exec", self.link.netns, *argv], *args, **kwargs)

        subprocess.Popen = in_netns  # type: ignore[misc]
        try:
            return super().start()
        finally:
            subprocess.Popen = real_popen  # type: ignore[misc]

    def _banner_ok(self) -> bool:
        try:
            with socket.create_connection((self.link.there, self.port), timeout=1) as s:
                return s.recv(64).startswith(b"SSH-2.0-")
        except OSError:
            return False

    def known_hosts_line(self) -> str:
        kind, blob = self.host_key_pub.read_text().split()[:2]
        return f"[{self.link.there}]:{self.port} {kind} {blob}\n"
