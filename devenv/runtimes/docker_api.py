"""A docker SDK client for a host: the local socket, or the remote daemon through devenv's own SSH connection.

Remote: every HTTP connection of the SDK is a channel on the host's already-authenticated paramiko
Transport running `docker system dial-stdio` (what the docker CLI does for ssh:// contexts). So the Docker API
travels the same verified connection as every other command: same host-key policy, same ProxyJump chain,
no second login, and it honours the host's own DOCKER_HOST/context. A connection that died and was re-dialled
by the pool is picked up on the next request, because each new HTTP connection asks the pool for the
current transport.
"""

from __future__ import annotations

import docker
import docker.constants
import urllib3
import urllib3.connection
import urllib3.connectionpool
from docker.transport.basehttpadapter import BaseHTTPAdapter
from docker.transport.sshconn import SSHConnectionPool

from devenv.errors import ConnectError, DevenvError
from devenv.remote.base import Connection
from devenv.remote.tunnels import no_delay, transport_of

DIAL_COMMAND = "docker system dial-stdio"
API_TIMEOUT = 120          # seconds per API call (image pulls and builds stream, so they are not cut by it)
MIN_API_VERSION = "1.40"   # device requests (GPUs) need 1.40 (Docker 19.03)


def client_for(conn: Connection, local: bool, timeout: int = API_TIMEOUT) -> docker.DockerClient:
    """A DockerClient for the host behind conn (the local daemon when local)."""
    if local:
        return _local_client(timeout)
    return _ssh_client(conn, timeout)


def _local_client(timeout: int) -> docker.DockerClient:
    try:
        client = docker.from_env(timeout=timeout)  # honours DOCKER_HOST like the docker CLI
        client.ping()
        return client
    except docker.errors.DockerException as exc:
        raise DevenvError(f"cannot reach the local Docker daemon: {_short(exc)}",
                          "start dockerd (sudo systemctl start docker) and check that you may use it "
                          "(member of the 'docker' group, or DOCKER_HOST set)") from None


def _ssh_client(conn: Connection, timeout: int) -> docker.DockerClient:
    api = docker.APIClient(base_url="ssh://devenv", version=MIN_API_VERSION, timeout=timeout,
                           use_ssh_client=True)  # no I/O here: the adapter is replaced below
    adapter = _ChannelAdapter(conn, timeout)
    api._custom_adapter.close()
    api._custom_adapter = adapter
    api.mount("http+docker://ssh", adapter)
    try:
        server = api.version(api_version=False)["ApiVersion"]
    except Exception as exc:  # any failure of the first request: say why, from the host's own docker CLI
        raise _explain_dial_failure(conn, exc) from None
    api._version = min(server, docker.constants.DEFAULT_DOCKER_API_VERSION, key=_version_key)
    if _version_key(api._version) < _version_key(MIN_API_VERSION):
        raise DevenvError(f"Docker on {conn.name} speaks API {server}; devenv needs {MIN_API_VERSION} or newer",
                          "upgrade Docker on the host to 19.03 or newer")
    client = docker.DockerClient.__new__(docker.DockerClient)
    client.api = api
    return client


class _ChannelConnection(urllib3.connection.HTTPConnection):
    """HTTP over one `docker system dial-stdio` exec channel."""

    def __init__(self, conn: Connection, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self._conn = conn
        self._timeout = timeout

    def connect(self) -> None:
        transport = transport_of(self._conn)
        no_delay(transport.sock)  # API calls are small request/response pairs: no delayed-ACK stalls
        channel = transport.open_session(timeout=30)
        channel.settimeout(self._timeout)
        channel.exec_command(DIAL_COMMAND)
        self.sock = channel


class _ChannelPool(urllib3.connectionpool.HTTPConnectionPool):
    scheme = "ssh"
    # docker-py's fix: reusing a pooled connection must not call fileno() on a paramiko channel (an fd leak).
    _get_conn = SSHConnectionPool._get_conn

    def __init__(self, conn: Connection, timeout: float, maxsize: int):
        super().__init__("localhost", timeout=timeout, maxsize=maxsize)
        self._conn = conn
        self._channel_timeout = timeout

    def _new_conn(self) -> _ChannelConnection:
        return _ChannelConnection(self._conn, self._channel_timeout)


class _ChannelAdapter(BaseHTTPAdapter):
    def __init__(self, conn: Connection, timeout: float, maxsize: int = 8):
        super().__init__()
        self._pool = _ChannelPool(conn, timeout, maxsize)

    def get_connection(self, url, proxies=None):
        return self._pool

    def close(self) -> None:
        self._pool.close()
        super().close()


def _explain_dial_failure(conn: Connection, exc: Exception) -> DevenvError:
    """The SDK only sees a closed channel; the host's docker CLI says what is wrong."""
    if isinstance(exc, DevenvError):
        return exc
    try:
        probe = conn.run("docker version --format '{{.Server.APIVersion}}'", timeout=30)
    except ConnectError as lost:
        return lost
    text = (probe.stderr or probe.stdout).strip()
    if probe.exit_code == 127:
        return DevenvError(f"Docker is not installed on {conn.name} (no `docker` command)",
                           "install Docker Engine on the host, or set `runtime: host` in its profile")
    if "permission denied" in text.lower():
        return DevenvError(f"the SSH user on {conn.name} may not use Docker: {_last_line(text)}",
                           "add the user to the 'docker' group on the host (sudo usermod -aG docker USER), "
                           "then log in again")
    if not probe.ok:
        return DevenvError(f"Docker on {conn.name} does not answer: {_last_line(text)}",
                           "start the daemon on the host (sudo systemctl start docker)")
    return DevenvError(f"cannot talk to Docker on {conn.name} through SSH: {_short(exc)}",
                       "check that `docker system dial-stdio` works on the host (Docker 18.09 or newer)")


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def _short(exc: Exception) -> str:
    return str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
