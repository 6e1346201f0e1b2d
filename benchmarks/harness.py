"""What the benchmarks share: the finish line (a Jupyter URL on this machine answering an authenticated
request), free ports, the machine's description and the medians of the runs."""

from __future__ import annotations

import os
import platform
import socket
import statistics
import time
import urllib.request
from pathlib import Path


def answers(url: str, token: str) -> bool:
    """Does url answer 200 to a request carrying Jupyter's token?"""
    try:
        req = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
        with urllib.request.urlopen(req, timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def wait_answering(url: str, token: str, timeout: float = 120, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not answers(url, token):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} did not answer within {timeout} s")
        time.sleep(interval)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def machine() -> str:
    """"host x86_64, 2 CPUs, load 1.9": where the numbers come from (the load: other work on it)."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, load {load:.1f}"


def medians(times: dict[str, list[float]]) -> dict[str, dict]:
    """{way: {"median_s", "runs"}} rounded to 10 ms."""
    return {way: {"median_s": round(statistics.median(runs), 2), "runs": [round(x, 2) for x in runs]}
            for way, runs in times.items() if runs}


def bench_home(env_name: str, image: str) -> tuple[Path, dict[str, str]]:
    """A DEVENV_HOME of its own for one benchmark (a temporary copy of the test host's, from .testhost/env) with
    the env profile env_name: image, free local ports for Jupyter and ssh, no GPUs; and the environment to run
    devenv in (that home, owner "bench"). The caller removes the folder."""
    import shutil
    import tempfile
    import textwrap

    home = Path(tempfile.mkdtemp(prefix="bench-home-"))
    shutil.copytree(os.environ["DEVENV_HOME"], home, dirs_exist_ok=True)
    (home / "profiles" / "envs").mkdir(parents=True, exist_ok=True)
    (home / "profiles" / "envs" / f"{env_name}.yaml").write_text(textwrap.dedent(f"""\
        image: {image}
        ports: {{jupyter: {free_port()}, ssh: {free_port()}}}
        shm_size: 1g
        gpus: none
        """))
    return home, {**os.environ, "DEVENV_HOME": str(home), "DEVENV_OWNER": "bench"}


def byte_compile_devenv() -> None:
    """devenv as `pip install ./devenv` (and scripts/install) leaves it: byte-compiled. A checkout run where
    PYTHONDONTWRITEBYTECODE is set would otherwise compile devenv again in every CLI run (about 0.2 s on
    2 cores: benchmarks/cli_startup.py), which no installed devenv does."""
    import subprocess
    import sys

    subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(__file__).resolve().parent.parent / "devenv")],
                   check=True, stdout=subprocess.DEVNULL)
