"""Run `devenv up CLUSTER` (it submits the job and holds the tunnel: laptop -> login node -> `srun --overlap`
relay -> Jupyter on the compute node), read the tokenised URL it prints, and run code in a real Jupyter kernel
through that tunnel: the GPU torch sees and Slurm's variables inside the job. Ctrl-C (SIGINT) then ends `up`'s
tunnel; the job keeps running until `devenv down`. Prints what it saw; exit 0 when the kernel saw an H200."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

# the project's tests/jupyter_client.py, not the jupyter_client package: run from the repo root (or benchmarks/gpu)
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
sys.path.insert(0, str(Path.cwd() / "tests"))
from jupyter_client import JupyterClient  # noqa: E402

URL = re.compile(r"http://127\.0\.0\.1:\d+/lab\?token=\S+")
CODE = ("import os, torch\n"
        "print('kernel:', torch.cuda.get_device_name(0), torch.__version__, 'devices', torch.cuda.device_count())\n"
        "print('job', os.environ.get('SLURM_JOB_ID'), 'node', os.environ.get('SLURMD_NODENAME'),\n"
        "      'CUDA_VISIBLE_DEVICES', os.environ.get('CUDA_VISIBLE_DEVICES'),\n"
        "      'SLURM_JOB_GPUS', os.environ.get('SLURM_JOB_GPUS'))\n"
        "x = torch.ones(1024, 1024, device='cuda'); print('matmul sum', float((x @ x).sum()))\n")

host = sys.argv[1]
started = time.monotonic()
up = subprocess.Popen([sys.executable, "-m", "devenv", "up", host], stdout=subprocess.PIPE,
                      stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
threading.Thread(target=lambda: [print("up(stderr)>", line.rstrip(), flush=True) for line in up.stderr],
                 daemon=True).start()
url = None
code = 1
try:
    for line in up.stdout:
        print("up>", URL.sub("http://127.0.0.1:<port>/lab?token=<hidden>", line.rstrip()), flush=True)
        found = URL.search(line)
        if found:
            url = found.group(0)
            break
        if time.monotonic() - started > 300:
            break
    if not url:
        sys.exit("no Jupyter URL from devenv up")
    print(f"URL after {time.monotonic() - started:.1f} s:", URL.sub("http://127.0.0.1:<port>/lab?token=<hidden>", url))
    # the URL's first answer: with the tunnel's first relay started while Jupyter starts (UpOptions.relay_ahead)
    # it comes at once; before, the relay's srun started only with the first connection
    api = url.split("/lab?")[0] + "/api/status?" + url.split("?", 1)[1]
    printed = time.monotonic()
    with urllib.request.urlopen(api, timeout=60) as answer:
        print(f"first answer {answer.status} {time.monotonic() - printed:.2f} s after the URL was printed")
    with JupyterClient(url, timeout=120) as jc:
        kernel = jc.start_kernel()
        result = jc.execute(kernel, CODE)
        print("kernel status:", result.status)
        print(result.stdout.strip())
        if result.status != "ok":
            print("kernel error:", (result.error or result.stderr or "").strip()[-1500:])
        code = 0 if result.status == "ok" and "H200" in result.stdout else 1
finally:
    up.send_signal(signal.SIGINT)     # as Ctrl-C: the tunnel closes, the job keeps running
    try:
        print("up exit:", up.wait(60))
    except subprocess.TimeoutExpired:
        up.kill()
        print("up did not end within 60 s of SIGINT; killed")
sys.exit(code)
