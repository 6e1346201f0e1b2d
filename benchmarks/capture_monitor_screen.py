#!/usr/bin/env python3
"""Capture what `devenv monitor` shows in a real terminal (tmux) into docs/monitor-screen.txt.

Two throwaway sshd on loopback: `gpu-replay`, whose nvidia-smi is the REPLAY of the recorded H200 stream
(tests/replay/nvidia-smi, 8 GPUs), and `cpu-box` without nvidia-smi. Halfway, gpu-replay's SSH sessions are
killed, so the capture shows the gap and the reconnect. Needs root, tmux and /usr/sbin/sshd.

    python3 benchmarks/capture_monitor_screen.py [--out docs/monitor-screen.txt]
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from monitor_helpers import replay_sshd  # noqa: E402
from sshd_fixture import make_key  # noqa: E402


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], check=True, capture_output=True, text=True).stdout


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(REPO / "docs" / "monitor-screen.txt"))
    parser.add_argument("--size", default="140x46")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="devenv-capture-"))
    home = work / "devenv-home"
    (home / "profiles" / "hosts").mkdir(parents=True)
    key = make_key(work / "id_ed25519")
    env = {**os.environ, "DEVENV_HOME": str(home), "DEVENV_SSH_CONFIG": str(work / "ssh_config"),
           "DEVENV_KNOWN_HOSTS": str(work / "known_hosts"), "TERM": "xterm-256color"}
    (work / "ssh_config").write_text("")
    width, height = args.size.split("x")
    session = f"devenv-capture-{os.getpid()}"
    with replay_sshd(work / "gpu", key, env={"REPLAY_GPUS": "8"}) as gpu, \
            replay_sshd(work / "cpu", key, replay=False) as cpu:
        known = ""
        for name, server in (("gpu-replay", gpu), ("cpu-box", cpu)):
            known += server.known_hosts_line()
            (home / "profiles" / "hosts" / f"{name}.yaml").write_text(
                f"description: capture\nssh:\n  hostname: 127.0.0.1\n  port: {server.port}\n  user: root\n"
                f"  identity_file: {key.path}\nruntime: docker\ndefault_env: cpu\n")
        (work / "known_hosts").write_text(known)
        command = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items() if k.startswith("DEVENV_") or k == "TERM")
        command += f" {shlex.quote(sys.executable)} -m devenv monitor gpu-replay cpu-box"
        tmux("new-session", "-d", "-s", session, "-x", width, "-y", height, "-c", str(REPO), command)
        try:
            time.sleep(10)
            gpu.kill_sessions()  # the host drops us: a gap, then the reconnect
            time.sleep(12)
            screen = tmux("capture-pane", "-p", "-t", session)
            tmux("send-keys", "-t", session, "q")
            time.sleep(1)
        finally:
            subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    header = (f"# `devenv monitor gpu-replay cpu-box` in a {args.size} terminal (tmux capture-pane), "
              f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.\n"
              "# gpu-replay's nvidia-smi is the REPLAY of a recorded H200 stream (tests/replay/nvidia-smi), 8 GPUs;\n"
              "# its SSH sessions were killed 10 s in, so the gap and the reconnect show. "
              "cpu-box has no nvidia-smi.\n\n")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(header + "\n".join(line.rstrip() for line in screen.splitlines()) + "\n")
    print(Path(args.out).read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
