"""Jupyter for the monitor's `j` key (L2): tunnels owned by the app for as long as it runs, and a URL shown only
once an HTTP request through the local port got Jupyter's answer.

Why one owner thread: an OpenSSH tunnel's child gets PR_SET_PDEATHSIG, which Linux fires when the *thread* that
forked it ends. Opened from a short-lived worker thread, the tunnel died a moment after its URL was announced
(and stayed a zombie). Here every tunnel is opened on one thread that lives until close(); the OpenSSH master
itself is also forked by one process-wide thread (devenv/remote/tunnels.py `spawn`), whoever asks first.

This module builds no connection and no tunnel itself: it is handed callables that do (the CLI's wiring).
"""

from __future__ import annotations

import http.client
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from devenv.errors import ConnectError, DevenvError
from devenv.remote.portprobe import api_version

_T = TypeVar("_T")

CHECK_TIMEOUT = 20.0   # the first request through a fresh tunnel may wait for sshd and Jupyter


class ForwardEnds(Protocol):
    """The two ports of a tunnel's forward (remote.tunnels.Forward; not imported: the TUI imports this module
    and must pull in no SSH library)."""

    @property
    def local_port(self) -> int: ...
    @property
    def remote_port(self) -> int: ...


class Tunnel(Protocol):
    @property
    def forwards(self) -> Sequence[ForwardEnds]: ...

    @property
    def kind(self) -> str: ...

    def alive(self) -> bool: ...
    def close(self) -> None: ...


@dataclass(frozen=True)
class JupyterLink:
    """A checked way to this host's Jupyter: the URL answered through local_port."""

    host: str
    env: str
    url: str
    local_port: int
    via: str                 # "openssh", "paramiko" (tunnels) or "local" (the host is this machine)
    jupyter_version: str | None = None
    reused: bool = False     # an open tunnel from an earlier `j`


def jupyter_answers(port: int, timeout: float = CHECK_TIMEOUT, *, sleep: Callable[[float], None] = time.sleep,
                    ) -> str:
    """Jupyter's version, once `GET /api` on 127.0.0.1:port answers as Jupyter does (it needs no token).
    Retries while the port refuses or the tunnel drops the request; ConnectError past timeout."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    while True:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=min(5.0, max(0.5, timeout)))
        try:
            conn.request("GET", "/api", headers={"Accept": "application/json"})
            response = conn.getresponse()
            body = response.read(4096)
            if response.status == 200:
                version = api_version(body)
                if version is not None:
                    return version
                last = "an HTTP server answers, but not as Jupyter does"
            else:
                last = f"HTTP {response.status} {response.reason}"
        except (OSError, http.client.HTTPException) as e:
            last = str(e) or type(e).__name__
        finally:
            conn.close()
        if time.monotonic() >= deadline:
            raise ConnectError(f"Jupyter does not answer on 127.0.0.1:{port}: {last}",
                               "the environment may still be starting (`devenv logs HOST`); press j again")
        sleep(0.25)


class TunnelOwner:
    """Runs tunnel-opening calls on one daemon thread that lives until close(), and keeps one tunnel a host."""

    def __init__(self) -> None:
        # (fn, its future) per call, of any result type; None ends the thread
        self._jobs: queue.Queue[tuple[Callable[[], Any], Future[Any]] | None] = queue.Queue()
        self._tunnels: dict[str, Tunnel] = {}
        self._lock = threading.Lock()
        self._closed = False
        self.thread = threading.Thread(target=self._serve, name="monitor-tunnels", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fn, future = job
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn())
                except BaseException as e:  # handed to the caller, who re-raises it
                    future.set_exception(e)

    def call(self, fn: Callable[[], _T]) -> _T:
        """fn() on the owner thread; its result or its exception."""
        if self._closed:
            raise DevenvError("the monitor is closing", "start it again")
        future: Future[_T] = Future()
        self._jobs.put((fn, future))
        return future.result()

    def tunnel(self, host: str) -> Tunnel | None:
        """The host's open tunnel, if it is still alive (a dead one is closed and forgotten)."""
        with self._lock:
            tunnel = self._tunnels.get(host)
            if tunnel is not None and not tunnel.alive():
                del self._tunnels[host]
                tunnel.close()
                tunnel = None
            return tunnel

    def open(self, host: str, opener: Callable[[], Tunnel]) -> Tunnel:
        """A live tunnel for host: the one already open, else opener() run on the owner thread."""
        found = self.tunnel(host)
        if found is not None:
            return found
        tunnel = self.call(opener)
        with self._lock:
            old = self._tunnels.pop(host, None)
            self._tunnels[host] = tunnel
        if old is not None:
            old.close()
        return tunnel

    def forget(self, host: str) -> None:
        with self._lock:
            tunnel = self._tunnels.pop(host, None)
        if tunnel is not None:
            tunnel.close()

    def close(self) -> None:
        """Close every tunnel and end the owner thread (at the monitor's quit)."""
        self._closed = True
        with self._lock:
            tunnels, self._tunnels = list(self._tunnels.values()), {}
        for tunnel in tunnels:
            tunnel.close()
        self._jobs.put(None)


def open_link(owner: TunnelOwner, host: str, env: str, access: Callable[[], tuple[int, str]],
              opener: Callable[[int], Tunnel] | None, *, url_of: Callable[[int, str], str],
              check: Callable[[int], str] = jupyter_answers) -> JupyterLink:
    """The checked link to host's Jupyter. access() -> (Jupyter's port on the host, token); opener(port) opens
    a tunnel to it (None when the host is this machine: no tunnel). A tunnel that opens but reaches no
    Jupyter is closed again, so the next `j` starts over."""
    remote_port, token = access()
    if opener is None:
        return JupyterLink(host, env, url_of(remote_port, token), remote_port, "local", check(remote_port))
    reused = owner.tunnel(host) is not None
    tunnel = owner.open(host, lambda: opener(remote_port))
    port = tunnel.forwards[0].local_port
    if tunnel.forwards[0].remote_port != remote_port:  # the environment was recreated on another port
        owner.forget(host)
        tunnel, reused = owner.open(host, lambda: opener(remote_port)), False
        port = tunnel.forwards[0].local_port
    try:
        version = check(port)
    except DevenvError:
        owner.forget(host)
        raise
    return JupyterLink(host, env, url_of(port, token), port, tunnel.kind, version, reused)
