"""Open `devenv jupyter HOST` (which holds devenv's tunnel), read the tokenised URL it prints, and run
`torch.cuda.get_device_name()` in a real Jupyter kernel through that tunnel (REST + the kernel websocket)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from jupyter_client import JupyterClient  # noqa: E402

host = sys.argv[1]
proc = subprocess.Popen([sys.executable, "-m", "devenv", "jupyter", host], stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, text=True)
url = None
deadline = time.monotonic() + 120
try:
    for line in proc.stdout:
        print("jupyter>", line.rstrip(), flush=True)
        found = re.search(r"http://127\.0\.0\.1:\d+/\S*token=\S+", line)
        if found:
            url = found.group(0)
            break
        if time.monotonic() > deadline:
            break
    if not url:
        sys.exit("no Jupyter URL from devenv jupyter")
    print("URL:", re.sub(r"token=\S+", "token=<hidden>", url))
    with JupyterClient(url) as jc:
        kernel = jc.start_kernel()
        result = jc.execute(kernel, "import torch; print(torch.cuda.get_device_name(), torch.__version__)")
        print("kernel status:", result.status)
        print("kernel stdout:", result.stdout.strip())
        sys.exit(0 if result.status == "ok" and "H200" in result.stdout else 1)
finally:
    proc.terminate()
    proc.wait(timeout=20)
