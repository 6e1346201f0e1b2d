#!/usr/bin/env python3
"""Benchmark (issue 25): how soon a held tunnel answers again after the network comes back, and what a held idle
tunnel costs; devenv's held tunnel (services.held_tunnel, its OpenSSH ControlMaster) against autossh (-M 0,
ServerAlive-based: the anchor), a plain `ssh -N -L` (no recovery), and devenv with its network watch off
(devenv-nowatch: the back-off alone, the baseline of remote.network_watch), in the same run, all three with the same
keepalive (ServerAliveInterval 5, ServerAliveCountMax 3, devenv's default for its masters).

The host: a private sshd in a network namespace behind a veth link (tests/netns_link.py), taken down for the
outage and up again; each holder forwards a local port to the sshd itself, so an answer is its SSH banner.
  long outage   longer than the keepalive's give-up (15-20 s): the link is declared dead, each holder must
                log in again; recovery = link up -> the local port answers
  short outage  shorter than that: the old connection survives and TCP retransmission carries it
  drop outage   as long as the long one, but the link stays up and every packet is dropped (iptables DROP in
                the host's namespace): no link or route change for remote.network_watch to see
  idle          a held tunnel doing nothing: CPU seconds and context switches (wakeups) of the holder's
                processes (devenv: python + ssh master; autossh: autossh + ssh; ssh)
Run as root (ip netns, sshd):

    python3 benchmarks/tunnel_recovery.py [--repeat 3] [--outage 30] [--short 4] [--idle 60] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks"))

from harness import free_port, machine  # noqa: E402
from netns_link import NetnsLink, NetnsSSHD  # noqa: E402
from sshd_fixture import make_key  # noqa: E402

KEEPALIVE = ["-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3"]

DEVENV_HOLDER = """
import sys
from devenv.config import hostref
from devenv.remote import tunnels
from devenv.remote.tunnels import Forward, open_tunnel
from devenv.services.held_tunnel import HeldTunnel

host = hostref.load_host("gpu1")

def reopen(forwards):
    tunnels.relink(host, 5.0)
    return open_tunnel(host, None, forwards, ready_timeout=5.0)

tunnel = open_tunnel(host, None, [Forward("ssh", "127.0.0.1", int(sys.argv[1]), int(sys.argv[2]))])
HeldTunnel(host.name, tunnel, reopen, lambda line: print(line, flush=True), watch_network=sys.argv[3] == "1").hold()
"""


def banner(port: int, wait: float = 0.5) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=wait) as s:
            s.settimeout(wait)
            return s.recv(8).startswith(b"SSH-")
    except OSError:
        return False


def wait_answer(port: int, limit: float) -> float | None:
    """Seconds until the local port answers with a banner; None if not within limit."""
    start = time.monotonic()
    while time.monotonic() - start < limit:
        if banner(port):
            return time.monotonic() - start
        time.sleep(0.02)
    return None


class Setup:
    def __init__(self, work: Path, link: NetnsLink, server: NetnsSSHD, key: Path):
        self.work, self.link, self.server, self.key = work, link, server, key
        home = work / "home"
        (home / "profiles" / "hosts").mkdir(parents=True)
        (home / "profiles" / "hosts" / "gpu1.yaml").write_text(
            f"ssh:\n  hostname: {link.there}\n  port: {server.port}\n  user: root\n  identity_file: {key}\n"
            "runtime: docker\n")
        self.known_hosts = home / "known_hosts"
        self.known_hosts.write_text(server.known_hosts_line())
        (home / "ssh_config").touch()
        self.environ = {**{k: v for k, v in os.environ.items() if not k.startswith("DEVENV_")},
                        "DEVENV_HOME": str(home), "DEVENV_SSH_CONFIG": str(home / "ssh_config"),
                        "DEVENV_KNOWN_HOSTS": str(self.known_hosts), "PYTHONPATH": str(REPO),
                        "AUTOSSH_GATETIME": "0"}
        self.environ.pop("SSH_AUTH_SOCK", None)

    def ssh_argv(self, local: int) -> list[str]:
        return ["-N", "-F", "/dev/null", "-o", "BatchMode=yes", "-o", "ExitOnForwardFailure=yes",
                "-o", f"UserKnownHostsFile={self.known_hosts}", "-o", "StrictHostKeyChecking=yes", *KEEPALIVE,
                "-i", str(self.key), "-p", str(self.server.port),
                "-L", f"127.0.0.1:{local}:127.0.0.1:{self.server.port}", f"root@{self.link.there}"]

    def start(self, mode: str, local: int) -> subprocess.Popen:
        if mode.startswith("devenv"):   # devenv-nowatch: the back-off alone, as before remote.network_watch
            argv = [sys.executable, "-c", DEVENV_HOLDER, str(self.server.port), str(local),
                    "0" if mode == "devenv-nowatch" else "1"]
        elif mode == "autossh":
            argv = ["autossh", "-M", "0", *self.ssh_argv(local)]
        else:
            argv = ["ssh", *self.ssh_argv(local)]
        return subprocess.Popen(argv, env=self.environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True, stdin=subprocess.DEVNULL)


def stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def outage(setup: Setup, mode: str, seconds: float, cut: str = "link") -> dict[str, float | None]:
    """One outage of `seconds`: (time the holder said the link was dead, time to answer after the network is
    back). cut: "link" (the veth taken down and up) or "drop" (the link up, every packet dropped by iptables
    in the host's namespace, then let through)."""
    local = free_port()
    proc = setup.start(mode, local)
    lines: list[tuple[float, str]] = []
    threading.Thread(target=lambda: [lines.append((time.monotonic(), line)) for line in proc.stdout],
                     daemon=True).start()
    try:
        if wait_answer(local, 30) is None:
            raise RuntimeError(f"{mode} never answered: {[line for _, line in lines]}")
        down_at = time.monotonic()
        setup.link.down() if cut == "link" else setup.link.drop()
        time.sleep(seconds)
        setup.link.up() if cut == "link" else setup.link.undrop()
        recovered = wait_answer(local, 30)   # past that: counted as no recovery
        detected = next((t - down_at for t, line in lines if "dropped" in line), None)
        return {"recovery_s": recovered, "detected_s": detected}
    finally:
        stop(proc)


def tree(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [pid], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def usage(pids: list[int]) -> tuple[float, int]:
    """(CPU seconds, context switches of every thread) of these processes so far."""
    ticks, switches = 0, 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])
            for task in Path(f"/proc/{pid}/task").iterdir():
                for line in (task / "status").read_text().splitlines():
                    if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                        switches += int(line.split()[1])
        except OSError:
            continue
    return ticks / os.sysconf("SC_CLK_TCK"), switches


def idle(setup: Setup, mode: str, seconds: float) -> dict[str, float]:
    local = free_port()
    proc = setup.start(mode, local)
    try:
        if wait_answer(local, 30) is None:
            raise RuntimeError(f"{mode} never answered")
        time.sleep(2)   # past the start
        pids = tree(proc.pid)
        cpu0, sw0 = usage(pids)
        time.sleep(seconds)
        cpu1, sw1 = usage(pids)
        return {"cpu_ms_per_min": round((cpu1 - cpu0) * 1000 * 60 / seconds, 1),
                "wakeups_per_s": round((sw1 - sw0) / seconds, 2), "processes": len(pids)}
    finally:
        stop(proc)


def median(values: list[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return round(statistics.median(got), 2) if len(got) == len(values) and got else None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--outage", type=float, default=30.0)
    parser.add_argument("--short", type=float, default=4.0)
    parser.add_argument("--idle", type=float, default=60.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    modes = ["devenv", "devenv-nowatch", *(["autossh"] if shutil.which("autossh") else []), "ssh"]
    results: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory() as tmp, NetnsLink() as link:
        work = Path(tmp)
        key = make_key(work / "id_ed25519")
        with NetnsSSHD(work / "sshd", link, authorized_keys=[key.public]) as server:
            setup = Setup(work, link, server, key.path)
            for mode in modes:
                row: dict[str, object] = {}
                for name, seconds, cut in (("long", args.outage, "link"), ("short", args.short, "link"),
                                           ("drop", args.outage, "drop")):
                    runs = [outage(setup, mode, seconds, cut) for _ in range(args.repeat)]
                    row[f"{name}_recovery_s"] = [r["recovery_s"] for r in runs]
                    row[f"{name}_recovery_median_s"] = median([r["recovery_s"] for r in runs])
                    row[f"{name}_detected_s"] = [r["detected_s"] for r in runs]
                row.update(idle(setup, mode, args.idle))
                results[mode] = row
                print(mode, json.dumps(row), file=sys.stderr, flush=True)
    report = {"machine": machine(), "outage_s": args.outage, "short_outage_s": args.short, "idle_s": args.idle,
              "repeat": args.repeat, "keepalive": "ServerAliveInterval 5, ServerAliveCountMax 3", "modes": results}
    if args.json:
        print(json.dumps(report))
        return
    print(f"{report['machine']}; outages {args.outage:g} s and {args.short:g} s, {args.repeat} runs each")
    print("| holder | recovery after a long outage (median, runs) | after a short one | after a long DROP | "
          "idle CPU ms/min | wakeups/s |")
    print("|---|---|---|---|---|---|")
    for mode, row in results.items():
        print(f"| {mode} | {row['long_recovery_median_s']} {row['long_recovery_s']} | "
              f"{row['short_recovery_median_s']} {row['short_recovery_s']} | "
              f"{row['drop_recovery_median_s']} {row['drop_recovery_s']} | {row['cpu_ms_per_min']} | "
              f"{row['wakeups_per_s']} |")


if __name__ == "__main__":
    main()
