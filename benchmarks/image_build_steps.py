"""Time the PyTorch image's build step by step (issue 22: the demo's first `up` is mostly this build).

Builds images/pytorch.Dockerfile with the same context and build arguments `devenv up` sends (the env profile,
$DEVENV_WHEELHOUSE, $DEVENV_BUILD_CA_BUNDLE), with `docker build --no-cache` on the local dockerd, and prints
each step's wall time. `--variant DIR` builds a second context whose bundled files come from DIR instead
(e.g. a changed install-python.sh), in the same run, after the first: compare the two tables.

    source .testhost/env && python3 benchmarks/image_build_steps.py [--env cpu] [--variant DIR] [--runs N]
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

from devenv.config import profiles
from devenv.env import image_context


def context_tar(env_name: str, variant: Path | None) -> tuple[Path, dict[str, str]]:
    env = profiles.load_env(env_name)
    inputs = image_context.BuildInputs.from_options(None, None)
    fileobj, dockerfile, _ = image_context.make_context(env, inputs)
    out = Path(tempfile.mkdtemp(prefix="imgbench-")) / "ctx.tar"
    if variant is None:
        with open(out, "wb") as f:
            shutil.copyfileobj(fileobj, f)
    else:  # the same tar, with the bundled files DIR has replaced
        with tarfile.open(fileobj=fileobj) as src, tarfile.open(out, "w") as dst:
            for info in src.getmembers():
                mine = variant / info.name
                if "/" not in info.name and mine.is_file():
                    data = mine.read_bytes()
                    info.size = len(data)
                    dst.addfile(info, io.BytesIO(data))
                else:
                    dst.addfile(info, src.extractfile(info) if info.isfile() else None)
    assert dockerfile == "pytorch.Dockerfile", dockerfile
    return out, image_context.build_args(env, inputs)


def build(tar: Path, args: dict[str, str], tag: str) -> list[tuple[str, float]]:
    folder = tar.parent / "ctx"
    cmd = ["docker", "build", "--no-cache", "-t", tag, "-f", str(folder / "pytorch.Dockerfile")]
    for k, v in args.items():
        cmd += ["--build-arg", f"{k}={v}"]
    with tarfile.open(tar) as t:
        t.extractall(folder, filter="tar")
    cmd.append(str(folder))
    steps: list[tuple[str, float]] = []
    start = last = time.monotonic()
    name = "context"
    if True:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, "DOCKER_BUILDKIT": "0"})
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("Step "):
                now = time.monotonic()
                steps.append((name, now - last))
                name, last = line.strip()[:90], now
        proc.wait()
    steps.append((name, time.monotonic() - last))
    steps.append(("TOTAL", time.monotonic() - start))
    if proc.returncode != 0:
        raise SystemExit(f"docker build failed ({proc.returncode})")
    return steps


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--env", default="cpu")
    parser.add_argument("--variant", type=Path)
    parser.add_argument("--runs", type=int, default=1)
    opts = parser.parse_args()
    kinds = [("bundled", None)] + ([("variant", opts.variant)] if opts.variant else [])
    for run in range(opts.runs):
        for label, variant in kinds:
            tar, args = context_tar(opts.env, variant)
            steps = build(tar, args, f"devenv-bench/pytorch:{label}")
            size = subprocess.run(["docker", "image", "inspect", "-f", "{{.Size}}", f"devenv-bench/pytorch:{label}"],
                                  capture_output=True, text=True).stdout.strip()
            print(f"## run {run + 1}, {label}: {steps[-1][1]:.1f} s, image {int(size) / 1e6:.0f} MB")
            for step, took in steps[:-1]:
                if took >= 1.0:
                    print(f"  {took:6.1f} s  {step}")
            shutil.rmtree(tar.parent)
    subprocess.run(["docker", "rmi", "-f"] + [f"devenv-bench/pytorch:{k}" for k, _ in kinds],
                   capture_output=True)


if __name__ == "__main__":
    main()
