"""Python run on the host next to Jupyter (L0: text only), shared by the bare-host and the Slurm launchers.

Both run with the host's own python, standard library only (`python - ARGS` or `python -c`)."""

from __future__ import annotations

# The local port a launcher gives Jupyter: the preferred one when it is free on the host's loopback, else any
# free one. Pasted into a launcher script; it defines free(port) and leaves `port` unset.
# free() does not only look: it reserves. Jupyter runs with port_retries 0 and starts seconds after the launcher
# chose (imports), so a port that was merely free when looked at could be taken by then, e.g. by the launcher of a
# second environment on the same node, which would look, see it free and record the same port, and one Jupyter
# would then fail to start. So the port stays bound by the launcher's socket (not listening): bound without
# SO_REUSEADDR, which no other launcher's bind passes, then marked SO_REUSEADDR, which Jupyter's own bind (tornado
# sets it too) passes, and inheritable, so it stays held across exec (or `pass_fds=held`) until Jupyter listens.
# The port recorded is then the one Jupyter gets.
FREE_PORT = r'''
held = []
def free(port):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        s.close()
        return None
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.set_inheritable(True)
    held.append(s)
    return s.getsockname()[1]
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
