"""Python run on the host next to Jupyter (L0: text only), shared by the bare-host and the Slurm launchers.

Both run with the host's own python, standard library only (`python - ARGS` or `python -c`)."""

from __future__ import annotations

# The local port a launcher gives Jupyter: the preferred one when it is free on the host's loopback, else any
# free one. Pasted into a launcher script; it defines free(port) and leaves `port` unset.
FREE_PORT = r'''
def free(port):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port)); return s.getsockname()[1]
    except OSError:
        return None
    finally:
        s.close()
'''

# Whether the Jupyter on 127.0.0.1:argv[1] answers its /api: "jupyter ok: ..." (exit 0) or "jupyter down: ..."
PROBE = r"""
import json, sys, urllib.request
try:
    with urllib.request.urlopen("http://127.0.0.1:%s/api" % sys.argv[1], timeout=2) as r:
        print("jupyter ok: jupyter-server", json.load(r).get("version", "?"))
except Exception as e:
    print("jupyter down: %s: %s" % (type(e).__name__, e)); sys.exit(1)
"""
