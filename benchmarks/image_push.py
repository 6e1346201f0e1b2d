#!/usr/bin/env python3
"""Benchmark: `devenv image push` against the plain pipe people type, in the same run, same image, same hosts.

  plain     ssh testbox docker save IMAGE | ssh DEST docker load       (OpenSSH, the test host's ssh_config)
  devenv    devenv image push testbox DEST --env E                      (the user's OpenSSH, spliced here)
  paramiko  the same with DEVENV_PIPE=paramiko                          (two paramiko channels relayed here)

DEST is a second dockerd behind its own sshd (tests/second_dockerd.py; --dest docker2, the default) or the test
host's podman (--dest podman). Both streams go through this machine. The image is the test host's Debian base
plus a label of a fresh token (a new id, so DEST never has it); after each run the image is removed from DEST
again. The ways alternate (plain, devenv, plain, ...) so that the machine's load falls on all alike.

    source .testhost/env && python3 benchmarks/image_push.py [--repeat 3] [--base devenv-base:bookworm]
        [--dest docker2|podman] [--ways plain,devenv,paramiko] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import secrets
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "tests"))

from harness import machine  # noqa: E402


def run(*argv: str, stdin: str | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run(list(argv), capture_output=True, text=True, input=stdin, env=env, timeout=1800)
    if done.returncode != 0:
        sys.exit(f"{shlex.join(argv)[:300]} -> {done.returncode}\n{done.stderr[-2000:]}")
    return done


def image_id(engine: str, ref: str) -> str | None:
    found = subprocess.run([engine, "image", "inspect", "--format", "{{.Id}}", ref], capture_output=True, text=True)
    return found.stdout.strip().removeprefix("sha256:") if found.returncode == 0 else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--base", default="devenv-base:bookworm", help="the image the pushed one adds a label to")
    parser.add_argument("--dest", choices=["docker2", "podman"], default="docker2",
                        help="docker2: a second dockerd behind its own sshd (tests/second_dockerd.py); podman: "
                             "the test host's podman (testbox-podman)")
    parser.add_argument("--ways", default="plain,devenv", help="of plain, devenv (OpenSSH), paramiko "
                        "(devenv with DEVENV_PIPE=paramiko), alternated in this order")
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
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory())
        tmp_home = Path(tmp) / "home"
        subprocess.run(["cp", "-r", home, str(tmp_home)], check=True)
        tmp_known = Path(tmp) / "known_hosts"
        subprocess.run(["cp", known_hosts, str(tmp_known)], check=True)
        env_name = f"bench-{token}"
        (tmp_home / "profiles" / "envs" / f"{env_name}.yaml").write_text(f"description: bench\nimage: {image}\n")
        environ = {**os.environ, "DEVENV_HOME": str(tmp_home), "DEVENV_KNOWN_HOSTS": str(tmp_known),
                   "PYTHONPATH": str(REPO)}
        ssh = ["ssh", "-F", ssh_config, "-o", f"UserKnownHostsFile={tmp_known}", "-o", "StrictHostKeyChecking=yes"]
        if args.dest == "docker2":
            from second_dockerd import SecondDockerd

            key = Path(ssh_config).with_name("id_ed25519")
            d2 = stack.enter_context(SecondDockerd(key.with_name("id_ed25519.pub").read_text()))
            (tmp_home / "profiles" / "hosts" / "testbox-docker2.yaml").write_text(d2.host_profile(str(key)))
            with open(tmp_known, "a") as f:
                f.write(d2.known_hosts_line())
            dest, dest_ssh, dest_load = "testbox-docker2", [*ssh, "-i", str(key), "-o", "IdentitiesOnly=yes",
                                                         "-p", str(d2.port), "root@127.0.0.1"], "docker load"

            def dest_id(ref: str) -> str | None:
                return d2.image_id(ref)

            def dest_rmi(ref: str) -> None:
                d2.docker("rmi", "-f", ref)
        else:
            dest, dest_ssh, dest_load = "testbox-podman", [*ssh, "testbox"], "podman load"

            def dest_id(ref: str) -> str | None:
                return image_id("podman", ref)

            def dest_rmi(ref: str) -> None:
                subprocess.run(["podman", "rmi", "-f", ref], capture_output=True)

        stack.callback(dest_rmi, source_id)
        stack.callback(subprocess.run, ["docker", "rmi", "-f", image], capture_output=True)
        plain = f"{shlex.join(ssh)} testbox docker save {image} | {shlex.join(dest_ssh)} {dest_load}"
        push = [sys.executable, "-m", "devenv", "image", "push", "testbox", dest, "--env", env_name, "--json"]
        all_ways = {
            "plain": (["bash", "-o", "pipefail", "-c", plain], environ),
            "devenv": (push, {**environ, "DEVENV_PIPE": "openssh"}),
            "paramiko": (push, {**environ, "DEVENV_PIPE": "paramiko"}),
        }
        ways = {way: all_ways[way] for way in args.ways.split(",")}
        times: dict[str, list[float]] = {way: [] for way in ways}
        cpu: dict[str, list[float]] = {way: [] for way in ways}   # user+sys of the way's processes here
        stream: dict[str, list[float]] = {way: [] for way in ways}   # devenv's own: the stream alone, logins done
        loads: list[float] = []
        for _ in range(args.repeat):
            for way, (argv, way_env) in ways.items():
                assert dest_id(source_id) is None
                loads.append(os.getloadavg()[0])
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                started = time.perf_counter()
                done = run(*argv, env=way_env)
                times[way].append(time.perf_counter() - started)
                if way != "plain":
                    stream[way].append(json.loads(done.stdout[done.stdout.index("{"):])["hosts"][dest]["seconds"])
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu[way].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
                assert dest_id(source_id) == source_id, f"{way} did not load {source_id}"
                dest_rmi(source_id)
    result = {
        "machine": machine(), "image_bytes": size, "repeat": args.repeat, "dest": args.dest,
        "load_avg_1m": [min(loads), statistics.median(loads), max(loads)],
        "ways": {way: {"median_s": round(statistics.median(runs), 2), "runs_s": [round(r, 2) for r in runs],
                       "mb_s": round(size / 1e6 / statistics.median(runs), 1),
                       "cpu_s_median": round(statistics.median(cpu[way]), 2),
                       "stream_s_median": round(statistics.median(stream[way]), 2) if stream[way] else None}
                 for way, runs in times.items()},
    }
    for way in times:
        if way != "plain" and "plain" in times:
            result[f"{way}_vs_plain"] = round(statistics.median(times["plain"]) / statistics.median(times[way]), 3)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{result['machine']}; image {size / 1e6:.0f} MB -> {args.dest}, {args.repeat} runs each, alternating; "
          f"load (1 min) min/median/max {result['load_avg_1m']}")
    for way, row in result["ways"].items():
        print(f"  {way:8s} median {row['median_s']:6.2f} s  {row['mb_s']:6.1f} MB/s  cpu here {row['cpu_s_median']} s"
              f"   runs {row['runs_s']}")
    for way in times:
        if f"{way}_vs_plain" in result:
            print(f"  {way} throughput / plain: {result[f'{way}_vs_plain']:.3f}x")


if __name__ == "__main__":
    main()
