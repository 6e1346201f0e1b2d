#!/usr/bin/env python3
"""Benchmark: the demo's main job (scripts/demo after the set-up) as on a fresh machine, on the shared test host.

scripts/demo runs `devenv check testbox`, `devenv up testbox --detach --yes` (which builds the PyTorch CPU image
from nothing on a fresh machine), `devenv sanity testbox` and the Jupyter tunnel. Here the same commands run on
an environment of their own: the `cpu` profile of the test host under another name, with an image tag of this
run (so `up` builds it) and a build argument no other build has (TORCH_INDEX_URL, unused with the wheelhouse),
so the build cache misses from the builder stage's install on: the venv's install, its copy between the stages
and the final stage's runtime files are built as on a fresh machine; the base stage's two small steps
(install-os.sh finds everything in the base, the profile adds no apt/user) may come from the cache.
Each command's wall time is printed; then a second `up` with the image present (the demo's `up` without the
build), and `down --purge`. The image is removed at the end (it is this run's own tag).

Hold the test host's lock around it (it starts an environment on the shared dockerd and sshd):
    source .testhost/env && flock /tmp/devenv-it.lock python3 benchmarks/demo_main_job.py
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.harness import byte_compile_devenv, free_port, machine  # noqa: E402


def main() -> None:
    if not os.environ.get("DEVENV_SSH_CONFIG"):
        sys.exit("source .testhost/env first")
    byte_compile_devenv()   # as installed (see harness)
    run_id = f"{os.getpid()}-{int(time.time())}"
    env_name, image = f"bench-demo-{os.getpid()}", f"devenv-bench/pytorch:demo-{run_id}"
    home = Path(tempfile.mkdtemp(prefix="bench-demo-home-"))
    shutil.copytree(os.environ["DEVENV_HOME"], home, dirs_exist_ok=True)
    (home / "profiles" / "envs").mkdir(parents=True, exist_ok=True)
    (home / "profiles" / "envs" / f"{env_name}.yaml").write_text(textwrap.dedent(f"""\
        image: {image}
        build:
          dockerfile: pytorch.Dockerfile
          args:
            BASE_IMAGE: devenv-base:bookworm
            TORCH_INDEX: cpu
            TORCH_VERSION: "2.13.0"
            TORCH_INDEX_URL: https://download.pytorch.org/whl/cpu/{run_id}
        torch: "2.13.0+cpu"
        ports: {{jupyter: {free_port()}, ssh: {free_port()}}}
        shm_size: 2g
        gpus: none
        """))
    environ = {**os.environ, "DEVENV_HOME": str(home), "DEVENV_OWNER": "bench", "DEVENV_ENV": env_name}

    def devenv(*args: str, ok: tuple[int, ...] = (0,)) -> float:
        started = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "devenv", *args], env=environ, cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        took = time.monotonic() - started
        if proc.returncode not in ok:
            print(proc.stdout[-3000:])
            raise SystemExit(f"devenv {' '.join(args)} exited {proc.returncode}")
        print(f"  {took:6.1f} s  devenv {' '.join(args)}  (load {os.getloadavg()[0]:.1f})", flush=True)
        return took

    print(f"{machine()}, {time.strftime('%Y-%m-%d %H:%M')}, image {image}", flush=True)
    total = 0.0
    try:
        total += devenv("check", "testbox", ok=(0, 4))
        total += devenv("up", "testbox", "--detach", "--yes")
        total += devenv("sanity", "testbox", ok=(0, 4))   # 4: no GPU here (the demo accepts it)
        print(f"  {total:6.1f} s  check + up (with the build) + sanity", flush=True)
        devenv("down", "testbox", "--purge", "--yes")
        devenv("up", "testbox", "--detach", "--yes")     # the same without the build: the image is there now
    finally:
        subprocess.run([sys.executable, "-m", "devenv", "down", "testbox", "--purge", "--yes"], env=environ,
                       cwd=REPO, capture_output=True)
        subprocess.run(["docker", "rmi", image], capture_output=True)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
