#!/usr/bin/env python3
"""Benchmark: `devenv up` (image present) against doing the same by hand, and a re-`up`, on the test host.

Each timing runs from the command's start until a Jupyter URL on THIS machine answers an authenticated
request (/api/status with the token): what the user waits for.
  devenv up     `devenv up testbox --env E`: check, volume, container (labels, secrets put in, GPUs/ulimits/
                shm as profiled), wait for Jupyter and sshd, tunnel, URL. The container is removed between runs.
  devenv re-up  the same command again with the environment running: reattach + tunnel.
  manual        what a careful user types (one ssh login per step): `docker run -d` with the ports on the host's
                loopback and the token file mounted, `docker exec -d ... sshd`, a single ssh running a curl loop
                until Jupyter answers, then `ssh -N -L` and wait for the local port.
Same image, same host, same Jupyter; medians of --runs.

    source .testhost/env && python3 benchmarks/up_vs_manual.py [--runs 3] [--image devenv-test/pytorch:slim]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.harness import bench_home, byte_compile_devenv, free_port, machine, medians, wait_answering  # noqa: E402
from devenv.config import profiles  # noqa: E402
from devenv.remote import openssh  # noqa: E402

ENV_NAME = "bench-up"


def devenv_up(environ: dict) -> float:
    """Seconds from `devenv up` to an answering URL; the process (holding the tunnel) is then stopped."""
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "devenv", "up", "testbox", "--env", ENV_NAME],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environ, cwd=REPO)
    try:
        url = None
        for line in proc.stdout:
            if "Jupyter" in line and "token=" in line:
                url = line.split()[-1]
                break
        if url is None:
            raise RuntimeError(f"devenv up printed no URL: {proc.stderr.read()}")
        base, token = url.split("/lab?token=")
        wait_answering(base + "/api/status", token)
        return time.monotonic() - started
    finally:
        proc.terminate()
        proc.wait(30)


def manual_up(host, image: str) -> float:
    """The same by hand; seconds to an answering URL. Cleans up after itself."""
    *options, dest = openssh.host_options(host)
    if options[-1:] == ["--"]:  # the options end with "--" before the destination: flags go before it
        options = options[:-1]
    ssh = ["ssh", *options]
    name = f"bench-manual-{secrets.token_hex(3)}"
    token = secrets.token_hex(24)
    token_file = Path(tempfile.mkdtemp()) / "token"
    token_file.write_text(token)
    token_file.chmod(0o644)
    jport, sport, lport = free_port(), free_port(), free_port()
    tunnel = None
    started = time.monotonic()
    try:
        subprocess.run([*ssh, "--", dest, f"docker run -d --name {name} --init -p 127.0.0.1:{jport}:8888 "
                        f"-p 127.0.0.1:{sport}:22 -v {name}-ws:/workspace --shm-size 1g "
                        f"-v {token_file}:/etc/devenv/jupyter_token:ro -e DEVENV_SSHD=0 {image}"],
                       check=True, capture_output=True)
        subprocess.run([*ssh, "--", dest, f"docker exec -d {name} sh -c 'ssh-keygen -A; mkdir -p /run/sshd; "
                        f"/usr/sbin/sshd'"], check=True, capture_output=True)
        subprocess.run([*ssh, "--", dest,
                        f"until curl -sf -o /dev/null http://127.0.0.1:{jport}/api; do sleep 0.2; done"],
                       check=True, capture_output=True, timeout=120)
        tunnel = subprocess.Popen([*ssh, "-N", "-o", "ExitOnForwardFailure=yes",
                                   "-L", f"127.0.0.1:{lport}:127.0.0.1:{jport}", "--", dest],
                                  stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_answering(f"http://127.0.0.1:{lport}/api/status", token)
        return time.monotonic() - started
    finally:
        if tunnel:
            tunnel.terminate()
            tunnel.wait()
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)
        subprocess.run(["docker", "volume", "rm", "-f", f"{name}-ws"], capture_output=True)
        shutil.rmtree(token_file.parent, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--image", default="devenv-test/pytorch:slim")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not os.environ.get("DEVENV_SSH_CONFIG"):
        sys.exit("source .testhost/env first")
    if subprocess.run(["docker", "image", "inspect", args.image], capture_output=True).returncode != 0:
        sys.exit(f"image {args.image} is not on the test host: run the integration tests, or "
                 f"`devenv image build testbox --env <an env with image: {args.image}>`")
    byte_compile_devenv()   # as installed (see harness)
    home, environ = bench_home(ENV_NAME, args.image)
    host = profiles.load_host("testbox")

    def down():
        subprocess.run([sys.executable, "-m", "devenv", "down", "testbox", "--env", ENV_NAME, "--purge", "--yes"],
                       env=environ, cwd=REPO, capture_output=True)

    times: dict[str, list[float]] = {"devenv up": [], "devenv re-up": [], "manual": []}
    try:
        devenv_up(environ)  # warm-up: the volume, the laptop key, learned host facts, page cache
        down()
        for _ in range(args.runs):
            times["manual"].append(manual_up(host, args.image))
            times["devenv up"].append(devenv_up(environ))
            times["devenv re-up"].append(devenv_up(environ))
            down()
    finally:
        down()
        shutil.rmtree(home, ignore_errors=True)
    rows = medians(times)
    info = {"machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M"), "image": args.image, "runs": args.runs,
            "ratio_up_to_manual": round(rows["devenv up"]["median_s"] / rows["manual"]["median_s"], 2),
            "results": rows}
    if args.json:
        print(json.dumps(info, indent=2))
        return
    print(f"{info['machine']}, {info['date']}, image {args.image}, {args.runs} runs (medians); "
          f"up / manual = {info['ratio_up_to_manual']}x")
    print("| way | seconds to an answering Jupyter URL here | runs |")
    print("|---|---|---|")
    for way, row in rows.items():
        print(f"| {way} | {row['median_s']} | {', '.join(map(str, row['runs']))} |")


if __name__ == "__main__":
    main()
