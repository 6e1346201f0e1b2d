# devenv: JupyterLab behind a token read from a root-only file (never argv, env or `docker inspect`).
# Listens on the container's interface; the host publishes the port on its 127.0.0.1 only.
import os

TOKEN_FILE = "/etc/devenv/jupyter_token"

try:
    with open(TOKEN_FILE) as f:
        token = f.read().strip()
except OSError:
    token = ""
if len(token) < 32:
    raise SystemExit(f"devenv: no Jupyter token in {TOKEN_FILE}; refusing to start an open Jupyter server")

c = get_config()  # noqa: F821 (provided by Jupyter)
c.IdentityProvider.token = token
c.ServerApp.ip = "0.0.0.0"
c.ServerApp.port = 8888               # the port the host publishes (on its 127.0.0.1 only)
c.ServerApp.port_retries = 0          # a taken port is an error, not a silent move
c.ServerApp.open_browser = False
c.ServerApp.allow_root = True
c.ServerApp.root_dir = os.environ.get("DEVENV_WORKSPACE", "/workspace")
c.ServerApp.terminado_settings = {"shell_command": ["/bin/bash", "-l"]}
