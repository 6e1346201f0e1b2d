"""A small real Jupyter client for tests: the REST API (requests) plus a kernel's websocket (websocket-client).

    with JupyterClient(url_with_token) as jc:
        kernel = jc.start_kernel()
        result = jc.execute(kernel, "print(6 * 7)")   # -> ExecResult(status="ok", stdout="42\n", ...)

Speaks the Jupyter messaging protocol v5 over /api/kernels/<id>/channels, as JupyterLab does.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlparse

import requests
import websocket


@dataclass
class ExecResult:
    status: str                       # ok | error | timeout
    stdout: str = ""
    stderr: str = ""
    result: str | None = None         # text/plain of execute_result, if any
    error: str | None = None
    messages: list[str] = field(default_factory=list)


class JupyterClient:
    def __init__(self, url: str, timeout: float = 30):
        parsed = urlparse(url)
        self.base = f"{parsed.scheme}://{parsed.netloc}"
        self.token = parse_qs(parsed.query).get("token", [""])[0]
        self.timeout = timeout
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"token {self.token}"
        self._kernels: list[str] = []

    def __enter__(self) -> JupyterClient:
        return self

    def __exit__(self, *exc) -> None:
        for kernel in self._kernels:
            try:
                self.session.delete(f"{self.base}/api/kernels/{kernel}", timeout=10)
            except requests.RequestException:
                pass
        self.session.close()

    def api(self, path: str, method: str = "GET", **kwargs) -> requests.Response:
        return self.session.request(method, f"{self.base}{path}", timeout=self.timeout, **kwargs)

    def start_kernel(self, name: str = "python3") -> str:
        resp = self.api("/api/kernels", "POST", json={"name": name})
        resp.raise_for_status()
        kernel = resp.json()["id"]
        self._kernels.append(kernel)
        return kernel

    def execute(self, kernel: str, code: str, timeout: float = 60) -> ExecResult:
        ws_url = self.base.replace("http", "ws", 1) + f"/api/kernels/{kernel}/channels"
        ws = websocket.create_connection(ws_url, header=[f"Authorization: token {self.token}"], timeout=timeout)
        try:
            msg_id = uuid.uuid4().hex
            ws.send(json.dumps({
                "header": {"msg_id": msg_id, "username": "test", "session": uuid.uuid4().hex,
                           "msg_type": "execute_request", "version": "5.3", "date": ""},
                "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
                "content": {"code": code, "silent": False, "store_history": False, "user_expressions": {},
                            "allow_stdin": False, "stop_on_error": True},
            }))
            out = ExecResult(status="timeout")
            deadline = time.monotonic() + timeout
            got_reply = got_idle = False
            while not (got_reply and got_idle) and time.monotonic() < deadline:
                msg = json.loads(ws.recv())
                if msg.get("parent_header", {}).get("msg_id") != msg_id:
                    continue
                kind = msg["header"]["msg_type"]
                out.messages.append(kind)
                content = msg.get("content", {})
                if kind == "stream":
                    if content.get("name") == "stdout":
                        out.stdout += content.get("text", "")
                    else:
                        out.stderr += content.get("text", "")
                elif kind == "execute_result":
                    out.result = content.get("data", {}).get("text/plain")
                elif kind == "error":
                    out.error = f"{content.get('ename')}: {content.get('evalue')}"
                elif kind == "execute_reply":
                    out.status = content.get("status", "?")
                    got_reply = True
                elif kind == "status" and content.get("execution_state") == "idle":
                    got_idle = True
            return out
        finally:
            ws.close()
