#!/usr/bin/env python3
"""Where a devenv command spends its time on the wire: a timeline of SSH connections, exec channels, Docker
API calls (each over a `dial-stdio` channel), keepalive round trips and OpenSSH processes.

    source .testhost/env && python3 benchmarks/trace_remote.py up testbox --env E
    python3 benchmarks/trace_remote.py --until-url up testbox --env E   # stop at the answering URL, as
                                                                         # benchmarks/up_vs_manual.py does

The command runs in a child process with hooks installed (nothing in devenv changes); each event is written
as it ends, so a command stopped by SIGTERM (a held tunnel) still leaves its timeline. Times are seconds since
the child's start; "import" is everything before the command's first line of code.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
T0 = time.monotonic()
sys.path.insert(0, str(REPO))

from benchmarks.harness import answers  # noqa: E402


def _install_hooks(log_path: str) -> None:
    import functools
    import threading

    out = open(log_path, "a", buffering=1)  # noqa: SIM115  (open as long as the process lives)
    lock = threading.Lock()

    def emit(kind: str, what: str, start: float, end: float) -> None:
        with lock:
            out.write(json.dumps({"kind": kind, "what": what[:110], "start": start - T0, "end": end - T0}) + "\n")

    def timed(owner, name: str, kind: str, describe):
        original = getattr(owner, name)

        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            start = time.monotonic()
            try:
                return original(*args, **kwargs)
            finally:
                emit(kind, describe(*args, **kwargs), start, time.monotonic())

        setattr(owner, name, wrapper)

    from devenv.remote import dial, ssh
    timed(dial, "open_chain", "connect", lambda target, **kw: f"{target.label} ({target.address})")
    timed(ssh.SSHConnection, "run", "run", lambda self, command, **kw: " ".join(command.split()))
    timed(ssh.SSHConnection, "ping", "ping", lambda self, *a, **kw: "keepalive@openssh.com")
    timed(ssh.SSHConnection, "probe_forwarding", "channel", lambda self: "direct-tcpip probe")
    timed(ssh.SSHConnection, "open_port", "channel", lambda self, host, port, timeout: f"direct-tcpip {host}:{port}")
    timed(ssh.SSHConnection, "stream", "stream", lambda self, command, **kw: " ".join(command.split()))

    import urllib3.connectionpool
    timed(urllib3.connectionpool.HTTPConnectionPool, "urlopen", "docker",
          lambda self, method, url, *a, **kw: f"{method} {url.split('?')[0]}")
    from devenv.runtimes import docker_api
    timed(docker_api._ChannelConnection, "connect", "channel",
          lambda self: f"streamlocal {self._dialer.socket_path}" if self._dialer.socket_path
          else f"exec {self._dialer.dial}")

    original_popen = subprocess.Popen.__init__

    def popen(self, args, *a, **kw):
        start = time.monotonic()
        original_popen(self, args, *a, **kw)
        emit("process", " ".join(map(str, args)) if isinstance(args, list) else str(args), start, time.monotonic())

    subprocess.Popen.__init__ = popen  # type: ignore[method-assign]


def child(argv: list[str], log_path: str) -> None:
    _install_hooks(log_path)
    from devenv.cli import main

    with open(log_path, "a") as out:
        out.write(json.dumps({"kind": "import", "what": "devenv + hooks", "start": 0.0,
                              "end": time.monotonic() - T0}) + "\n")
    main(argv, prog_name="devenv")


def parent(argv: list[str], until_url: bool) -> None:
    fd, log_name = tempfile.mkstemp(prefix="devenv-trace-", suffix=".ndjson")
    os.close(fd)
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, __file__, "--child", log_name, *argv], stdout=subprocess.PIPE,
                            text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    done_at = None
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(line)
        if until_url and "token=" in line:
            base, token = line.split()[-1].split("/lab?token=")
            while not answers(base + "/api/status", token):
                time.sleep(0.05)
            done_at = time.monotonic() - started
            proc.terminate()
            break
    proc.wait(60)
    total = done_at if done_at is not None else time.monotonic() - started
    events = [json.loads(x) for x in Path(log_name).read_text().splitlines()]
    os.unlink(log_name)
    events.sort(key=lambda e: e["start"])
    print(f"\n{'start':>6} {'dur':>6}  kind     what")
    for e in events:
        print(f"{e['start']:6.3f} {e['end'] - e['start']:6.3f}  {e['kind']:<8} {e['what']}")
    counts: dict[str, int] = {}
    for e in events:
        counts[e["kind"]] = counts.get(e["kind"], 0) + 1
    print(f"\ntotal {total:.2f} s ({'to an answering URL' if done_at is not None else 'to exit'}); "
          + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[3:], sys.argv[2])
    else:
        args = sys.argv[1:]
        until = "--until-url" in args
        parent([a for a in args if a != "--until-url"], until)
