#!/usr/bin/env python3
"""Benchmark: devenv's tunnel against OpenSSH's own `ssh -L`, to the test host, in the same run.

Three ways to forward 127.0.0.1:<local> on this machine to a server on the host's loopback:
  ssh -L      the baseline: `ssh -N -L ...` typed by hand (same config, same host key checks)
  devenv      devenv.remote.tunnels.open_tunnel: what `devenv up`/`jupyter`/`tunnel` use (OpenSSH when installed)
  paramiko    devenv's fallback when no OpenSSH client is installed (DEVENV_TUNNEL=paramiko)
The server on the host side is in this script (the test host is this machine): it streams N MB for
throughput, and answers 64-byte requests for latency. Measured per mode:
  throughput  MB/s of one download of --mb MB through a fresh connection (best of --repeat)
  small req   requests/s and p50/p99 latency of --requests request/response pairs, each on a NEW connection
              (what a browser's or Jupyter client's many short requests cost through the tunnel)
  rtt         p50 of 64-byte ping-pongs on one kept-open connection

    source .testhost/env && python3 benchmarks/tunnel_throughput.py [--mb 512] [--requests 300] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from devenv.config import profiles  # noqa: E402
from devenv.remote import openssh  # noqa: E402
from devenv.remote.pool import get_connection  # noqa: E402
from devenv.remote.tunnels import Forward, OpenSSHTunnel, ParamikoTunnel, free_port  # noqa: E402

CHUNK = 256 * 1024
PING = b"x" * 64


class Server:
    """On the host's loopback: 'D<n>\\n' -> n bytes; 'P' -> 64-byte echo per 64 bytes received, until close."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket):
        with conn:
            head = conn.recv(1)
            if head == b"D":
                size = int(_readline(conn))
                block = b"\0" * CHUNK
                sent = 0
                while sent < size:
                    n = min(CHUNK, size - sent)
                    conn.sendall(block[:n])
                    sent += n
            elif head == b"P":
                while True:
                    data = _recv_exact(conn, 64)
                    if not data:
                        return
                    conn.sendall(data)


def _readline(conn: socket.socket) -> bytes:
    out = b""
    while not out.endswith(b"\n"):
        out += conn.recv(1)
    return out


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        part = conn.recv(n - len(data))
        if not part:
            return b""
        data += part
    return data


def download(port: int, size: int) -> float:
    """MB/s of one size-byte download through 127.0.0.1:port."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        started = time.perf_counter()
        s.sendall(b"D%d\n" % size)
        got = 0
        while got < size:
            part = s.recv(1 << 20)
            if not part:
                raise RuntimeError(f"download ended after {got} of {size} bytes")
            got += len(part)
        return size / 1e6 / (time.perf_counter() - started)


def small_requests(port: int, count: int) -> list[float]:
    """Latency (s) of count request/response pairs, each on a new connection."""
    out = []
    for _ in range(count):
        started = time.perf_counter()
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(b"P" + PING)
            if len(_recv_exact(s, 64)) != 64:
                raise RuntimeError("short answer")
        out.append(time.perf_counter() - started)
    return out


def rtt(port: int, count: int = 200) -> list[float]:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(b"P")
        out = []
        for _ in range(count):
            started = time.perf_counter()
            s.sendall(PING)
            _recv_exact(s, 64)
            out.append(time.perf_counter() - started)
        return out


def open_mode(mode: str, host, conn, remote_port: int):
    forward = Forward("bench", "127.0.0.1", remote_port, free_port())
    if mode == "ssh -L":
        argv = ["ssh", "-N", "-o", "ExitOnForwardFailure=yes", "-o", "BatchMode=yes",
                "-L", f"127.0.0.1:{forward.local_port}:127.0.0.1:{remote_port}", *openssh.host_options(host)]
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", forward.local_port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        return forward.local_port, lambda: (proc.terminate(), proc.wait())
    if mode == "devenv":
        tunnel = OpenSSHTunnel(host, [forward], shutil.which("ssh"))
    else:
        tunnel = ParamikoTunnel(conn, [forward])
    return forward.local_port, tunnel.close


def measure(mode: str, host, conn, server: Server, mb: int, requests: int, repeat: int) -> dict:
    port, close = open_mode(mode, host, conn, server.port)
    try:
        download(port, 8 * 1024 * 1024)  # warm-up: the first channel, TCP windows
        mbps = max(download(port, mb * 1024 * 1024) for _ in range(repeat))
        small = small_requests(port, requests)
        pings = rtt(port)
    finally:
        close()
    return {
        "mode": mode,
        "throughput_MBps": round(mbps, 1),
        "small_req_per_s": round(len(small) / sum(small), 1),
        "small_req_p50_ms": round(statistics.median(small) * 1000, 2),
        "small_req_p99_ms": round(sorted(small)[int(len(small) * 0.99) - 1] * 1000, 2),
        "rtt_p50_ms": round(statistics.median(pings) * 1000, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="testbox")
    parser.add_argument("--mb", type=int, default=512)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--modes", nargs="+", default=["ssh -L", "devenv", "paramiko"])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not os.environ.get("DEVENV_SSH_CONFIG"):
        sys.exit("source .testhost/env first (the test host's profile, ssh config and known_hosts)")
    host = profiles.load_host(args.host)
    conn = get_connection(host)
    conn.run("true")
    server = Server()
    rows = [measure(mode, host, conn, server, args.mb, args.requests, args.repeat) for mode in args.modes]
    base = next(r for r in rows if r["mode"] == "ssh -L")
    for row in rows:
        row["throughput_vs_ssh_L"] = round(row["throughput_MBps"] / base["throughput_MBps"], 2)
    info = {"machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
            "ssh": subprocess.run(["ssh", "-V"], capture_output=True, text=True).stderr.strip(),
            "mb": args.mb, "requests": args.requests, "rows": rows}
    if args.json:
        print(json.dumps(info, indent=2))
        return
    print(f"{info['machine']}; {info['ssh']}; {args.mb} MB downloads (best of {args.repeat}), "
          f"{args.requests} new-connection requests")
    print("| mode | MB/s | vs ssh -L | small req/s | p50 ms | p99 ms | rtt p50 ms |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['mode']} | {r['throughput_MBps']} | {r['throughput_vs_ssh_L']}x | {r['small_req_per_s']} | "
              f"{r['small_req_p50_ms']} | {r['small_req_p99_ms']} | {r['rtt_p50_ms']} |")


if __name__ == "__main__":
    main()
