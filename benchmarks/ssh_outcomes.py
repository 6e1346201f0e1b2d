#!/usr/bin/env python3
"""Benchmark: how long devenv takes to reach an outcome, against OpenSSH's own `ssh` on the same config, in the
same run (real sshds on loopback, from tests/sshd_fixture.py; run as root on the test machine).

Cases (each: `ssh -F cfg -o BatchMode=yes HOST true` vs devenv's SSHConnection(...).run("true")):
  connect        a plain host (includes `ssh -G` resolution for devenv, one process spawn)
  resolve        devenv's resolution alone (`ssh -G` per hop), and the fallback parser's
  jump3          a three-hop ProxyJump chain
  dying-proxy    ProxyCommand that prints an error and exits 7 (devenv used to spin until the banner timeout)
  silent         a server that accepts TCP and never sends a banner, ConnectTimeout 2
  slow-link      a relay adding 0.3 s each way, ConnectTimeout 1 (devenv used to give up: the whole key
                 exchange counted against ConnectTimeout)

    python3 benchmarks/ssh_outcomes.py [--repeat 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from sshd_fixture import SSHD, make_key  # noqa: E402

from devenv.config.profiles import SSHTarget  # noqa: E402
from devenv.errors import DevenvError  # noqa: E402
from devenv.remote.ssh import SSHConnection  # noqa: E402
from devenv.remote.sshconfig import resolve  # noqa: E402


def ssh_once(cfg: Path, host: str) -> tuple[float, bool]:
    start = time.perf_counter()
    rc = subprocess.run(["ssh", "-F", str(cfg), "-o", "BatchMode=yes", host, "true"], capture_output=True,
                        stdin=subprocess.DEVNULL, timeout=120).returncode
    return time.perf_counter() - start, rc == 0


def devenv_once(host: str) -> tuple[float, bool]:
    start = time.perf_counter()
    conn = SSHConnection(SSHTarget(alias=host), name=host)
    try:
        ok = conn.run("true", timeout=60).ok
    except DevenvError:
        ok = False
    finally:
        conn.close()
    return time.perf_counter() - start, ok


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    import socket
    import threading

    sys.path.insert(0, str(REPO / "tests" / "integration"))
    from test_openssh_parity import SlowRelay  # the same relay the tests use

    root = Path(tempfile.mkdtemp(prefix="bench-ssh-"))
    key = make_key(root / "id")
    servers = [SSHD(root / f"s{i}", authorized_keys=[key.public]).start() for i in range(4)]
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    held = []
    threading.Thread(target=lambda: [held.append(silent.accept()[0]) for _ in iter(int, 1)], daemon=True).start()
    relay = SlowRelay(servers[0].port, 0.3)
    kh = root / "known_hosts"
    kh.write_text("".join(s.known_hosts_line() for s in servers)
                  + f"[127.0.0.1]:{relay.port} " + servers[0].known_hosts_line().split(" ", 1)[1])
    common = f"  User root\n  IdentityFile {key.path}\n  UserKnownHostsFile {kh}\n  HostName 127.0.0.1\n"
    cfg = root / "config"
    cfg.write_text(
        f"Host plain\n  Port {servers[0].port}\n{common}"
        f"Host h1\n  Port {servers[1].port}\n{common}"
        f"Host h2\n  Port {servers[2].port}\n{common}  ProxyJump h1\n"
        f"Host h3\n  Port {servers[3].port}\n{common}  ProxyJump h2\n"
        f"Host jump3\n  Port {servers[0].port}\n{common}  ProxyJump h3\n"
        f"Host dying-proxy\n  Port {servers[0].port}\n{common}  ProxyCommand sh -c 'echo no >&2; exit 7'\n"
        f"Host silent\n  Port {silent.getsockname()[1]}\n{common}  ConnectTimeout 2\n"
        f"Host slow-link\n  Port {relay.port}\n{common}  ConnectTimeout 1\n")
    os.environ["DEVENV_SSH_CONFIG"] = str(cfg)
    os.environ.pop("DEVENV_KNOWN_HOSTS", None)
    os.environ.pop("SSH_AUTH_SOCK", None)

    rows = {}
    try:
        for case in ("plain", "jump3", "dying-proxy", "silent", "slow-link"):
            ssh_samples = [ssh_once(cfg, case) for _ in range(args.repeat)]
            dev_samples = [devenv_once(case) for _ in range(args.repeat)]
            rows[case] = {"ssh": {"s": round(statistics.median(t for t, _ in ssh_samples), 3),
                                  "ok": [ok for _, ok in ssh_samples]},
                          "devenv": {"s": round(statistics.median(t for t, _ in dev_samples), 3),
                                     "ok": [ok for _, ok in dev_samples]}}
        for mode, flag in (("ssh -G", None), ("fallback parser", "1")):
            if flag:
                os.environ["DEVENV_NO_SSH_CLIENT"] = flag
            t = []
            for _ in range(20):
                start = time.perf_counter()
                resolve(SSHTarget(alias="jump3"))
                t.append(time.perf_counter() - start)
            os.environ.pop("DEVENV_NO_SSH_CLIENT", None)
            rows[f"resolve jump3 ({mode})"] = {"devenv": {"s": round(statistics.median(t), 4)}}
    finally:
        relay.close()
        silent.close()
        for s in servers:
            s.stop()
    meta = {"machine": platform.node(), "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M"),
            "repeat": args.repeat}
    if args.json:
        print(json.dumps({"meta": meta, "rows": rows}, indent=2))
        return
    print(f"{meta}")
    print(f"{'case':<28} {'ssh s':>8} {'ssh ok':>10} {'devenv s':>9} {'devenv ok':>10}")
    for case, r in rows.items():
        s = r.get("ssh", {})
        print(f"{case:<28} {s.get('s', ''):>8} {str(s.get('ok', '')):>10} {r['devenv']['s']:>9} "
              f"{str(r['devenv'].get('ok', '')):>10}")


if __name__ == "__main__":
    main()
