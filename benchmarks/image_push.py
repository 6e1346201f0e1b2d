#!/usr/bin/env python3
"""Benchmark: `devenv image push` against the plain pipe people type, in the same run, same image, same hosts.

  plain    ssh testbox docker save IMAGE | ssh testbox podman load      (OpenSSH, the test host's ssh_config)
  devenv   devenv image push testbox testbox-podman --env E             (paramiko: two channels relayed here)

Both streams go through this machine (the test host's dockerd and podman behind one sshd: the source and the
destination of the table in docs/benchmarks.md). The image is the test host's Debian base plus a label of a
fresh token (a new id, so podman never has it); after each run the image is removed from podman again. The
ways alternate (plain, devenv, plain, ...) so that the machine's load falls on both alike.

    source .testhost/env && python3 benchmarks/image_push.py [--repeat 3] [--base devenv-base:bookworm] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from harness import machine  # noqa: E402


def run(*argv: str, stdin: str | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, input=stdin, env=env, check=True, timeout=1800)


def image_id(engine: str, ref: str) -> str | None:
    found = subprocess.run([engine, "image", "inspect", "--format", "{{.Id}}", ref], capture_output=True, text=True)
    return found.stdout.strip().removeprefix("sha256:") if found.returncode == 0 else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--base", default="devenv-base:bookworm", help="the image the pushed one adds a label to")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    home = os.environ.get("DEVENV_HOME")
    ssh_config = os.environ.get("DEVENV_SSH_CONFIG")
    known_hosts = os.environ.get("DEVENV_KNOWN_HOSTS")
    if not (home and ssh_config and known_hosts):
        sys.exit("source the test host's env file first (DEVENV_HOME, DEVENV_SSH_CONFIG, DEVENV_KNOWN_HOSTS)")

    token = secrets.token_hex(4)
    image = f"devenv-push-bench/img:{token}"
    run("docker", "build", "-q", "-t", image, "-", stdin=f"FROM {args.base}\nLABEL org.devenv.bench={token}\n")
    source_id = image_id("docker", image)
    assert source_id
    size = int(run("docker", "image", "inspect", "--format", "{{.Size}}", image).stdout.strip())
    with tempfile.TemporaryDirectory() as tmp:
        tmp_home = Path(tmp) / "home"
        subprocess.run(["cp", "-r", home, str(tmp_home)], check=True)
        env_name = f"bench-{token}"
        (tmp_home / "profiles" / "envs" / f"{env_name}.yaml").write_text(f"description: bench\nimage: {image}\n")
        environ = {**os.environ, "DEVENV_HOME": str(tmp_home), "PYTHONPATH": str(REPO)}
        ssh = ["ssh", "-F", ssh_config, "-o", f"UserKnownHostsFile={known_hosts}", "-o", "StrictHostKeyChecking=yes"]
        plain = (f"{' '.join(ssh)} testbox docker save {image} | {' '.join(ssh)} testbox podman load")
        ways = {
            "plain": ["bash", "-o", "pipefail", "-c", plain],
            "devenv": [sys.executable, "-m", "devenv", "image", "push", "testbox", "testbox-podman", "--env", env_name],
        }
        times: dict[str, list[float]] = {way: [] for way in ways}
        try:
            for _ in range(args.repeat):
                for way, argv in ways.items():
                    assert image_id("podman", source_id) is None
                    started = time.perf_counter()
                    run(*argv, env=environ)
                    times[way].append(time.perf_counter() - started)
                    assert image_id("podman", source_id) == source_id, f"{way} did not load {source_id}"
                    run("podman", "rmi", "-f", source_id)
        finally:
            subprocess.run(["podman", "rmi", "-f", source_id], capture_output=True)
            subprocess.run(["docker", "rmi", "-f", image], capture_output=True)
    result = {
        "machine": machine(), "image_bytes": size, "repeat": args.repeat,
        "ways": {way: {"median_s": round(statistics.median(runs), 2), "runs_s": [round(r, 2) for r in runs],
                       "mb_s": round(size / 1e6 / statistics.median(runs), 1)} for way, runs in times.items()},
    }
    result["devenv_vs_plain"] = round(statistics.median(times["plain"]) / statistics.median(times["devenv"]), 3)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{result['machine']}; image {size / 1e6:.0f} MB, {args.repeat} runs each, alternating")
    for way, row in result["ways"].items():
        print(f"  {way:7s} median {row['median_s']:6.2f} s  {row['mb_s']:6.1f} MB/s   runs {row['runs_s']}")
    print(f"  devenv throughput / plain: {result['devenv_vs_plain']:.3f}x")


if __name__ == "__main__":
    main()
