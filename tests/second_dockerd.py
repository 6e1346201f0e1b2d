"""A second, private dockerd on this machine, reached over SSH as a host of its own (a helper module to import).

    from second_dockerd import SecondDockerd
    with SecondDockerd(public_key) as d2:
        d2.port, d2.docker("images"), d2.host_profile(identity_file), d2.known_hosts_line()

The daemon has its own data-root, exec-root (its own managed containerd under it), pidfile, unix socket and
its OWN bridge (created here, deleted at exit), with --iptables=false --ip-masq=false --ip-forward=false: it
never touches docker0, the shared daemon's networks or the firewall. A private sshd (sshd_fixture.SSHD, loopback
only) sets DOCKER_HOST for its sessions (sshd_config SetEnv), so `ssh -p PORT root@127.0.0.1 docker ...` talks to
this daemon: a second engine behind a second SSH host name, as a second GPU box would be. Everything it started
and made (processes, mounts, bridge, directories) is removed at exit. Needs root.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from sshd_fixture import SSHD

START_TIMEOUT_S = 60


class SecondDockerd:
    def __init__(self, authorized_key: str):
        self.token = secrets.token_hex(4)
        self.dir = Path(tempfile.mkdtemp(prefix="dvp-", dir="/tmp"))   # short: the socket path has a length cap
        self.socket = self.dir / "docker.sock"
        self.bridge = f"dvp{self.token}"                                    # 11 chars (IFNAMSIZ 16)
        self.authorized_key = authorized_key
        self.proc: subprocess.Popen[bytes] | None = None
        self.sshd: SSHD | None = None
        self._bridge_made = False

    @property
    def port(self) -> int:
        assert self.sshd is not None
        return self.sshd.port

    def docker(self, *args: str, check: bool = False, stdin: str | None = None,
               timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """This daemon's docker CLI, here (not over SSH)."""
        return subprocess.run(["docker", "-H", f"unix://{self.socket}", *args], capture_output=True, text=True,
                              check=check, input=stdin, timeout=timeout)

    def image_id(self, ref: str) -> str | None:
        found = self.docker("image", "inspect", "--format", "{{.Id}}", ref)
        return found.stdout.strip().removeprefix("sha256:") if found.returncode == 0 else None

    def host_profile(self, identity_file: str, groups: tuple[str, ...] = ()) -> str:
        group_line = f"groups: [{', '.join(groups)}]\n" if groups else ""
        return (f"description: a second dockerd on this machine behind its own sshd (tests/second_dockerd.py)\n"
                f"ssh:\n  hostname: 127.0.0.1\n  port: {self.port}\n  user: root\n  identity_file: {identity_file}\n"
                f"runtime: docker\npython: python3\n{group_line}")

    def known_hosts_line(self) -> str:
        assert self.sshd is not None
        return self.sshd.known_hosts_line()

    def __enter__(self) -> SecondDockerd:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _start(self) -> None:
        subnet = self._free_subnet()
        subprocess.run(["ip", "link", "add", self.bridge, "type", "bridge"], check=True)
        self._bridge_made = True
        subprocess.run(["ip", "addr", "add", f"{subnet}.1/24", "dev", self.bridge], check=True)
        subprocess.run(["ip", "link", "set", self.bridge, "up"], check=True)
        argv = ["dockerd", "--data-root", str(self.dir / "data"), "--exec-root", str(self.dir / "exec"),
                "--pidfile", str(self.dir / "dockerd.pid"), "-H", f"unix://{self.socket}",
                "--bridge", self.bridge, "--iptables=false", "--ip-masq=false", "--ip-forward=false",
                "--cgroup-parent", f"devenv-{self.bridge}", "--containerd-namespace", f"devenv-{self.bridge}",
                "--containerd-plugins-namespace", f"devenv-{self.bridge}-plugins"]
        log = open(self.dir / "dockerd.log", "wb")
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while self.docker("version", "--format", "{{.Server.Version}}", timeout=10).returncode != 0:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the second dockerd did not start:\n{self.log_tail()}")
            time.sleep(0.2)
        self.sshd = SSHD(self.dir / "sshd", authorized_keys=[self.authorized_key],
                         extra_config=f"SetEnv DOCKER_HOST=unix://{self.socket}\n").start()

    def log_tail(self) -> str:
        try:
            return (self.dir / "dockerd.log").read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    @staticmethod
    def _free_subnet() -> str:
        used = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
        for _ in range(50):
            subnet = f"10.213.{secrets.randbelow(250) + 1}"
            if f" {subnet}." not in used:
                return subnet
        raise RuntimeError("no free 10.213.x.0/24 for the second dockerd's bridge")

    def stop(self) -> None:
        if self.sshd is not None:
            self.sshd.stop()
            self.sshd = None
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(30)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(10)
            self.proc = None
        self._kill_leftovers()
        self._unmount()
        if self._bridge_made:
            subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
            self._bridge_made = False
        shutil.rmtree(self.dir, ignore_errors=True)

    def _kill_leftovers(self) -> None:
        """Processes whose command line names this daemon's directory (its containerd and shims)."""
        mark = str(self.dir).encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                if mark in (entry / "cmdline").read_bytes():
                    os.kill(int(entry.name), signal.SIGKILL)
            except OSError:
                continue

    def _unmount(self) -> None:
        prefix = str(self.dir) + "/"
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()
                  if line.split()[1].startswith(prefix)]
        for mount in sorted(mounts, key=len, reverse=True):
            subprocess.run(["umount", "-l", mount], capture_output=True)
