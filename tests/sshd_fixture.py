"""Throwaway real OpenSSH servers on loopback for tests (a helper module to import, not a conftest).

    from sshd_fixture import SSHD, make_key          # tests/ is on sys.path under pytest
    key = make_key(tmp_path / "id_ed25519")
    with SSHD(tmp_path / "sshd", authorized_keys=[key.public]) as server:
        server.port, server.host_key_fingerprint(), server.log_text()

Each server has its own config, host key, authorized_keys, pid file and log (LogLevel DEBUG1, so jump
hosts log their `direct-tcpip` forwards), listens on 127.0.0.1 only, accepts root with a key only, and is
stopped (with every session it forked) at exit. Needs root and Debian's /usr/sbin/sshd.

clean_shell=True (the default) runs sshd in a private mount namespace (where `unshare` is allowed) in which
root's ~/.bashrc is an empty file of ours (`server.bashrc`): Debian's bash sources ~/.bashrc even for
`ssh host cmd`, and this machine's runs `pyenv init` (slow, and it takes a lock that a killed session leaves
behind). Commands then see sshd's default PATH (/usr/bin/python3); write to server.bashrc, or pass
clean_shell=False, to get another one.
"""

from __future__ import annotations

import functools
import os
import pwd
import shlex
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

SSHD_BIN = "/usr/sbin/sshd"
# False while pytest runs a test not marked integration (tests/conftest.py): starting an sshd then is refused.
ROOT_ALLOWED = True
SFTP_SERVER = "/usr/lib/openssh/sftp-server"


def free_port() -> int:
    """A loopback port nobody listens on right now (closed-port tests use it as is)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class Key:
    path: Path      # private key file
    public: str     # the .pub line ("ssh-ed25519 AAAA... comment")

    def fingerprint(self) -> str:
        return keygen_fingerprint(self.path.with_name(self.path.name + ".pub"))


def make_key(path: Path, kind: str = "ed25519", passphrase: str = "") -> Key:
    """ssh-keygen a client key (optionally encrypted) at path; path.pub holds the public half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", passphrase, "-C", f"test-{path.name}", "-f", str(path)],
                   check=True, stdin=subprocess.DEVNULL)
    return Key(path, path.with_name(path.name + ".pub").read_text().strip())


def keygen_fingerprint(pub_path: Path) -> str:
    """OpenSSH's own SHA256 fingerprint of a public key file (`ssh-keygen -lf`), e.g. 'SHA256:abc...'."""
    out = subprocess.run(["ssh-keygen", "-lf", str(pub_path)], check=True, capture_output=True, text=True).stdout
    return out.split()[1]


class SSHD:
    """One sshd on 127.0.0.1:<free port>; a context manager (start on enter, stop on exit)."""

    def __init__(self, workdir: Path, *, authorized_keys: list[str], host_key_type: str = "ed25519",
                 extra_config: str = "", port: int | None = None, clean_shell: bool = True,
                 namespace_setup: str = ""):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.host_key = self.workdir / f"ssh_host_{host_key_type}_key"
        self.log_path = self.workdir / "sshd.log"
        self.pid_path = self.workdir / "sshd.pid"
        self.config_path = self.workdir / "sshd_config"
        self.authorized_keys_path = self.workdir / "authorized_keys"
        self.authorized_keys_path.write_text("".join(k.strip() + "\n" for k in authorized_keys))
        if not self.host_key.exists():
            subprocess.run(["ssh-keygen", "-q", "-t", host_key_type, "-N", "", "-f", str(self.host_key)], check=True)
        self.config_path.write_text(self._config(extra_config))
        self.clean_shell = clean_shell
        self.namespace_setup = namespace_setup  # more sh commands run in that private mount namespace (mounts)
        self.bashrc = self.workdir / "root.bashrc"
        self.bashrc.touch()
        self.proc: subprocess.Popen | None = None

    def _config(self, extra: str) -> str:
        return f"""\
{extra}
Port {self.port}
ListenAddress 127.0.0.1
HostKey {self.host_key}
PidFile {self.pid_path}
AuthorizedKeysFile {self.authorized_keys_path}
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
AllowTcpForwarding yes
X11Forwarding no
PrintMotd no
LogLevel DEBUG1
Subsystem sftp {SFTP_SERVER}
"""

    @property
    def host_key_pub(self) -> Path:
        return self.host_key.with_name(self.host_key.name + ".pub")

    def host_key_fingerprint(self) -> str:
        return keygen_fingerprint(self.host_key_pub)

    def known_hosts_line(self) -> str:
        """The line OpenSSH would record for this server (non-22 port: `[127.0.0.1]:port`)."""
        kind, blob = self.host_key_pub.read_text().split()[:2]
        return f"[127.0.0.1]:{self.port} {kind} {blob}\n"

    def start(self) -> SSHD:
        if not ROOT_ALLOWED:
            raise RuntimeError(
                "this test starts a private sshd (it needs root) but is not marked integration: tests/conftest.py "
                "marks a test that reaches SSHD through its fixtures or the functions of tests/ it names; reach it "
                "that way (not through getattr or a string), so that `scripts/test --quick` leaves it out")
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation dir
        # -D: stay in the foreground (we own the pid); -E: log to a file we can read in assertions.
        argv = [SSHD_BIN, "-D", "-E", str(self.log_path), "-f", str(self.config_path)]
        if self.clean_shell and _can_unshare():
            rc = Path(pwd.getpwnam("root").pw_dir) / ".bashrc"
            script = (f"{{ [ ! -e {rc} ] || mount --bind {shlex.quote(str(self.bashrc))} {rc}; }} && "
                      + (f"{{ {self.namespace_setup}; }} && " if self.namespace_setup else "")
                      + f"exec {shlex.join(argv)}")
            argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script]  # exec: same pid
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited ({self.proc.returncode}): {self.proc.stderr.read().decode()}"
                                   f"\n{self.log_text()}")
            if self._banner_ok():
                return self
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"sshd on port {self.port} did not accept connections within 10s\n{self.log_text()}")

    def _banner_ok(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                return s.recv(64).startswith(b"SSH-2.0-")
        except OSError:
            return False

    def session_pids(self) -> list[int]:
        """Every process under the listener: the per-connection sshd processes and the commands they run."""
        if not self.proc:
            return []
        children: dict[int, list[int]] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
        found, todo = [], [self.proc.pid]
        while todo:
            for child in children.get(todo.pop(), []):
                found.append(child)
                todo.append(child)
        return found

    def signal_sessions(self, sig: int) -> list[int]:
        """Send sig to every process under the listener; those that ended between the listing and the signal
        (a session's short command, done) are left out of the answer."""
        signalled = []
        for pid in self.session_pids():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                continue
            signalled.append(pid)
        return signalled

    def kill_sessions(self) -> int:
        """SIGKILL every connection's sshd processes (as if the host dropped us); the listener stays up."""
        return len(self.signal_sessions(signal.SIGKILL))

    def pause_sessions(self) -> int:
        """SIGSTOP every session (a host that hangs or a network that silently drops); stop() cleans up."""
        return len(self.signal_sessions(signal.SIGSTOP))

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if not self.proc:
            return
        self.kill_sessions()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stderr.close()
        self.proc = None

    def __enter__(self) -> SSHD:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


@functools.lru_cache(maxsize=1)
def _can_unshare() -> bool:
    """A private mount namespace needs CAP_SYS_ADMIN (some CI containers lack it: then root's dotfiles stay)."""
    try:
        return subprocess.run(["unshare", "--mount", "--propagation", "private", "true"],
                              capture_output=True).returncode == 0
    except OSError:
        return False


def find_processes(marker: str, exact: bool = False) -> list[int]:
    """Pids whose command line contains (exact: is) marker; the test machine is the sshd host, so /proc is
    the remote's."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if cmdline == marker if exact else marker in cmdline:
            pids.append(int(entry.name))
    return pids


class SSHAgent:
    """A real ssh-agent on a private socket; add() loads a key (passphrase via SSH_ASKPASS, never argv)."""

    def __init__(self, workdir: Path):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.socket_path = self.workdir / "agent.sock"
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> SSHAgent:
        self.proc = subprocess.Popen(["ssh-agent", "-D", "-a", str(self.socket_path)],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 5
        while not self.socket_path.exists():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("ssh-agent did not create its socket")
            time.sleep(0.02)
        return self

    def add(self, key_path: Path, passphrase: str = "") -> None:
        askpass = self.workdir / "askpass.sh"
        askpass.write_text('#!/bin/sh\nprintf "%s\\n" "$TEST_KEY_PASSPHRASE"\n')
        askpass.chmod(0o700)
        env = dict(os.environ, SSH_AUTH_SOCK=str(self.socket_path), SSH_ASKPASS=str(askpass),
                   SSH_ASKPASS_REQUIRE="force", DISPLAY=":0", TEST_KEY_PASSPHRASE=passphrase)
        subprocess.run(["ssh-add", str(key_path)], env=env, check=True, stdin=subprocess.DEVNULL,
                       capture_output=True, start_new_session=True)

    def __exit__(self, *exc) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(5)
