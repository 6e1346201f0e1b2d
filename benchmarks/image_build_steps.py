"""Time the PyTorch image's build step by step (issue 22: the demo's first `up` is mostly this build).

Builds images/pytorch.Dockerfile with the same context and build arguments `devenv up` sends (the env profile,
$DEVENV_WHEELHOUSE, $DEVENV_BUILD_CA_BUNDLE), with `docker build --no-cache` on the local dockerd, and prints
each step's wall time. `--variant DIR` builds a second context whose bundled files come from DIR instead
(e.g. a changed install-python.sh), in the same run, after the first: compare the two tables.
`--product-commit` builds the same image a second way, by the product's run + commit path (see product_commit:
no COPY of the venv between stages). Runs alternate their order; `--reverse` starts with the other order, for
pairs over several invocations. Each build uses tags of this run only, removed at the end unless `--keep`.
`--base IMAGE` builds on another base (e.g. a test host base made another way). (`--run-commit`, the prototype
of session 5 measured in docs/benchmarks.md, built the Dockerfile as it was then: see the git history.)

    source .testhost/env && python3 benchmarks/image_build_steps.py [--env cpu] [--variant DIR]
        [--product-commit] [--reverse] [--runs N] [--base IMAGE] [--keep]
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


def product_commit(tar: Path, args: dict[str, str], tag: str, env_name: str) -> list[tuple[str, float]]:
    """The product's run + commit path (devenv.services.environments.docker.images, BUILD_BY_COMMIT): the
    Dockerfile's runtime stage built with `--no-cache --target runtime` (the layer cache off, as for the classic
    build beside it), then DockerRuntime.build_by_commit with image_context.commit_build's files and command,
    as `up` calls it (put_archive of the scripts, the wheelhouse and the build-args file; the output streamed;
    the commit; the container removed)."""
    import docker

    from devenv.runtimes.docker_runtime import DockerRuntime

    folder = tar.parent / "ctx"
    with tarfile.open(tar) as t:
        t.extractall(folder, filter="tar")
    steps: list[tuple[str, float]] = []
    start = time.monotonic()
    stage = f"{tag}-runtime"
    cmd = ["docker", "build", "--no-cache", "--target", "runtime", "-t", stage,
           "-f", str(folder / "pytorch.Dockerfile")]
    for k, v in args.items():
        cmd += ["--build-arg", f"{k}={v}"]
    proc = subprocess.run([*cmd, str(folder)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env={**os.environ, "DOCKER_BUILDKIT": "0"})
    if proc.returncode != 0:
        print(proc.stdout[-3000:])
        raise SystemExit(f"docker build --target runtime failed ({proc.returncode})")
    steps.append(("build --target runtime (base + runtime stages)", time.monotonic() - start))
    env = profiles.load_env(env_name)
    made = image_context.commit_build(env, image_context.BuildInputs.from_options(None, None))
    runtime = DockerRuntime(docker.from_env(timeout=None), "local")
    t0 = time.monotonic()
    try:
        stage_id = runtime.image(stage).id  # type: ignore[union-attr]
        runtime.build_by_commit(stage_id, made.archive, made.command, tag, {"org.devenv.env": env.name},
                                lambda event: None, "the venv")
    finally:
        made.close()
        runtime.close()
    steps.append(("run + commit of the venv (put_archive, run, commit, container removed)", time.monotonic() - t0))
    steps.append(("TOTAL", time.monotonic() - start))
    subprocess.run(["docker", "rmi", stage], capture_output=True)  # untags it (the image is its child)
    return steps


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--env", default="cpu")
    parser.add_argument("--variant", type=Path)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the images built (to try them), print their tags")
    parser.add_argument("--base", help="BASE_IMAGE to build on instead of the profile's (e.g. a new test host base)")
    parser.add_argument("--product-commit", action="store_true",
                        help="also build it by the product's run + commit path (DockerRuntime.build_by_commit)")
    parser.add_argument("--reverse", action="store_true", help="start with the other order (pairs over invocations)")
    opts = parser.parse_args()
    kinds = [("bundled", None)] + ([("variant", opts.variant)] if opts.variant else [])
    kinds += [("product-commit", None)] if opts.product_commit else []
    # tags of this run only (several people may run this on one shared dockerd)
    tags = {label: f"devenv-bench/pytorch:{label}-{os.getpid()}" for label, _ in kinds}
    for run in range(opts.runs):
        # alternated, so a change in load hits both alike
        order = kinds if (run + opts.reverse) % 2 == 0 else kinds[::-1]
        for label, variant in order:
            tar, args = context_tar(opts.env, variant)
            if opts.base:
                args["BASE_IMAGE"] = opts.base
            load = os.getloadavg()[0]
            if label == "product-commit":
                steps = product_commit(tar, args, tags[label], opts.env)
            else:
                steps = build(tar, args, tags[label])
            size = subprocess.run(["docker", "image", "inspect", "-f", "{{.Size}}", tags[label]],
                                  capture_output=True, text=True).stdout.strip()
            print(f"## run {run + 1}, {label}: {steps[-1][1]:.1f} s, image {int(size) / 1e6:.0f} MB, "
                  f"load {load:.1f} -> {os.getloadavg()[0]:.1f}", flush=True)
            for step, took in steps[:-1]:
                if took >= 1.0:
                    print(f"  {took:6.1f} s  {step}", flush=True)
            shutil.rmtree(tar.parent)
    if opts.keep:
        print("kept: " + " ".join(tags.values()))
    else:
        subprocess.run(["docker", "rmi", "-f", *tags.values()], capture_output=True)


if __name__ == "__main__":
    main()
