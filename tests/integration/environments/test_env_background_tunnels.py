"""Tunnels held in the background, as the user runs them against the test host's docker environment:
`jupyter --background` returns once the tunnel answers and a second start reuses it; `tunnels` lists it;
`tunnel PORT --background` then `tunnels stop ID` leaves no process, record or listening port; `down` stops the
environment's background tunnels, leaving no holder and no ssh master behind."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import requests

from devenv.remote.tunnels import control_dir_path


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0] == "Z"


def lab_answers(url: str) -> bool:
    base, token = url.split("/lab?token=")
    return requests.get(f"{base}/api/status", headers={"Authorization": f"token {token}"}, timeout=10).ok


def serves(url: str, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if requests.get(url, timeout=10).status_code == 200:
                return True
        except requests.RequestException:
            pass
        time.sleep(0.1)
    return False


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return False
    except OSError:
        return True


def masters() -> list[str]:
    control = str(control_dir_path())
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if "-M" in argv and any(arg.startswith(control) for arg in argv):
            found.append(" ".join(argv))
    return found


def test_background_tunnels_start_reuse_list_stop_and_end_with_down(test_env):
    env = test_env.name
    test_env.run("up", "testbox", "--env", env, "--detach", "--json")

    first = json.loads(test_env.run("jupyter", "testbox", "--env", env, "--background", "--json").stdout)
    assert first["reused"] is False and first["state"] == "open" and lab_answers(first["url"])
    again = json.loads(test_env.run("jupyter", "testbox", "--env", env, "--background", "--json").stdout)
    assert again["reused"] is True and again["pid"] == first["pid"] and again["url"] == first["url"]

    test_env.run("exec", "testbox", "--env", env, "--", "sh", "-c",
                 "cd /workspace && nohup python -m http.server 8765 >/dev/null 2>&1 &")
    ports = json.loads(test_env.run("tunnel", "testbox", "8765", "--env", env, "--background", "--json").stdout)
    local = ports["forwards"][0]["local_port"]
    assert serves(f"http://127.0.0.1:{local}/")   # (the server may still be starting: waited for, bounded)

    listed = json.loads(test_env.run("tunnels", "--json").stdout)
    assert listed["schema_version"] == 1
    assert {t["id"]: t["state"] for t in listed["tunnels"]} == {first["id"]: "open", ports["id"]: "open"}
    assert all(t["host"] == "testbox" and t["env"] == env and t["reconnects"] == 0 for t in listed["tunnels"])

    test_env.run("tunnels", "stop", ports["id"])
    assert gone(ports["pid"]) and refused(local)
    assert [t["id"] for t in json.loads(test_env.run("tunnels", "--json").stdout)["tunnels"]] == [first["id"]]
    unknown = test_env.run("tunnels", "stop", ports["id"], check=False)
    assert unknown.returncode == 2 and "no tunnel" in unknown.stderr

    down = json.loads(test_env.run("down", "testbox", "--env", env, "--json").stdout)
    assert down["tunnels_stopped"] == [first["id"]]
    assert gone(first["pid"])
    assert json.loads(test_env.run("tunnels", "--json").stdout)["tunnels"] == []
    assert list((test_env.home / "state" / "tunnels").iterdir()) == []   # no record, no log
    assert masters() == []
