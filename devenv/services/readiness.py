"""Do an environment's services answer (L2)? Jupyter's /api and sshd's banner on the ports the host publishes
on its 127.0.0.1, asked over the host's own connection (remote.portprobe: a direct-tcpip channel, no process
on the host): what `up` waits for, what `status` reports and what `up` repairs.

A probe reads what the service says, so "ok" means the published port reaches the service inside, which is
what the user's tunnel will use.
"""

from __future__ import annotations

from devenv.env.info import EnvStatus
from devenv.remote import portprobe
from devenv.remote.base import Connection
from devenv.services.jupyter import Probe

# the services a probe names, and the port (EnvStatus.ports, the spec's "ports") that publishes each
PORT_OF = {"jupyter": "jupyter", "sshd": "ssh"}
SERVICE_OF = {port: service for service, port in PORT_OF.items()}
CannotProbe = portprobe.CannotProbe


def ask(conn: Connection, ports: dict[str, int], services: list[str],
        timeout: float = portprobe.PROBE_TIMEOUT) -> dict[str, str]:
    """What each service says through its published port: {"jupyter": "ok: jupyter-server 2.14.2",
    "sshd": "down: closed without a banner"}. CannotProbe when this connection cannot reach the host's ports."""
    said: dict[str, str] = {}
    for service in services:
        port = ports.get(PORT_OF[service])
        try:
            if port is None:
                raise portprobe.NotAnswering("no port published")
            if service == "jupyter":
                said[service] = "ok: " + portprobe.jupyter_version(conn, port, timeout=timeout)
            else:
                said[service] = "ok: " + portprobe.sshd_banner(conn, port, timeout=timeout)
        except portprobe.NotAnswering as exc:
            said[service] = f"down: {exc}"
    return said


def probe_ports(conn: Connection, ports: dict[str, int], services: list[str],
                timeout: float = portprobe.PROBE_TIMEOUT) -> Probe:
    """ask() as the readiness wait's Probe (one line a service, as the in-container probe prints them)."""
    said = ask(conn, ports, services, timeout)
    down = tuple(name for name, answer in said.items() if not answer.startswith("ok"))
    return Probe(not down, "\n".join(f"{name} {answer}" for name, answer in said.items()), down=down)


def services_of(status: EnvStatus) -> list[str]:
    """The services of a running environment that the host publishes on its own 127.0.0.1 (none for an
    environment on other nodes, whose ports are the nodes')."""
    if not status.running or status.nodes:
        return []
    return [SERVICE_OF[port] for port in ("jupyter", "ssh") if port in status.ports]


def answers_of(conn: Connection, status: EnvStatus) -> dict[str, str]:
    """ask() for a running environment's published services; empty when there is nothing to ask or no way to."""
    services = services_of(status)
    if not services:
        return {}
    try:
        return ask(conn, status.ports, services)
    except CannotProbe:
        return {}


def down_of(probe: Probe) -> tuple[str, ...]:
    """The services a probe found down (also from a text-only probe: "sshd down: ..." lines)."""
    if probe.down:
        return probe.down
    return tuple(line.split(" ", 1)[0] for line in probe.text.splitlines() if " down" in line)
