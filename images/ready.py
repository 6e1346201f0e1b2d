#!/opt/venv/bin/python
"""devenv readiness probe, run inside the environment: do Jupyter and sshd answer on their ports?

Prints one line per service ("jupyter ok" / "sshd down: <why>") and exits 0 only when all answer.
Arguments name the services to check (default: both).
"""
import json
import socket
import sys
import urllib.request


def jupyter() -> str:
    # /api answers without a token with the server's version: enough to know it serves. The port is the
    # one the host publishes, so "ok" means the published port reaches Jupyter.
    with urllib.request.urlopen("http://127.0.0.1:8888/api", timeout=2) as resp:
        version = json.load(resp).get("version", "?")
    return f"jupyter-server {version}"


def sshd() -> str:
    with socket.create_connection(("127.0.0.1", 22), timeout=2) as s:
        s.settimeout(2)
        banner = s.recv(64).decode("ascii", "replace").strip()
    if not banner.startswith("SSH-"):
        raise OSError(f"unexpected banner {banner!r}")
    return banner


def main() -> int:
    checks = {"jupyter": jupyter, "sshd": sshd}
    wanted = sys.argv[1:] or list(checks)
    ok = True
    for name in wanted:
        try:
            print(f"{name} ok: {checks[name]()}")
        except Exception as exc:  # any failure means "not yet"; the caller decides how long to wait
            ok = False
            print(f"{name} down: {type(exc).__name__}: {exc}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
