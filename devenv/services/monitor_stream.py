"""The monitor's samples for machines (L2): NDJSON records (`devenv monitor --json --watch`) and a Prometheus
endpoint with dcgm-exporter's metric names and labels (`devenv monitor --prometheus 127.0.0.1:9400`).

Both read the same long-lived samplers as the TUI, through a SamplerSet that may change while they run (a
Slurm cluster's jobs start and end: services/monitor_sources.SamplerFollower keeps it in step). The record schema
is in docs/monitor.md; bump SCHEMA_VERSION on any change a reader could notice (a field renamed, removed or
retyped).
"""

from __future__ import annotations

import ipaddress
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from devenv.errors import DevenvError
from devenv.gpu.sample import GpuSample
from devenv.services.monitor import OK, HostSnapshot

if TYPE_CHECKING:  # prometheus_client is imported where it is used (only --prometheus needs it)
    from wsgiref.simple_server import WSGIServer

    from prometheus_client.metrics_core import Metric

SCHEMA_VERSION = 1


class Sampler(Protocol):
    host: str

    def snapshot(self) -> HostSnapshot: ...
    def stop(self, timeout: float = 3.0) -> None: ...   # a sampler taken out of a SamplerSet is stopped


class BadBind(DevenvError):
    exit_code = 2


class SamplerSet:
    """The samplers the streams read, by host, in the order they came: thread-safe, read afresh by each pass
    of watch_records and each scrape of DcgmCollector, so that a sampler put in (a new job's node) or swapped
    (an ended job's node, for its fixed job-ended snapshot) or dropped shows in both at once."""

    def __init__(self, samplers: Iterable[Sampler] = ()):
        self._lock = threading.Lock()
        self._by_host: dict[str, Sampler] = {s.host: s for s in samplers}

    def __iter__(self) -> Iterator[Sampler]:
        with self._lock:
            return iter(list(self._by_host.values()))

    def __len__(self) -> int:
        with self._lock:
            return len(self._by_host)

    def hosts(self) -> list[str]:
        with self._lock:
            return list(self._by_host)

    def put(self, sampler: Sampler) -> Sampler | None:
        """Add sampler, or replace the one of its host in place (its position kept); returns the one replaced."""
        with self._lock:
            old = self._by_host.get(sampler.host)
            self._by_host[sampler.host] = sampler
            return old

    def pop(self, host: str) -> Sampler | None:
        with self._lock:
            return self._by_host.pop(host, None)


def as_set(samplers: Iterable[Sampler]) -> SamplerSet:
    return samplers if isinstance(samplers, SamplerSet) else SamplerSet(samplers)


# --- NDJSON ---------------------------------------------------------------------------------------------

def record(snap: HostSnapshot) -> dict[str, Any]:
    """One NDJSON object: one host at one sample (the --json shape, plus schema_version and type)."""
    return {"schema_version": SCHEMA_VERSION, "type": "sample", **snap.to_dict()}


def watch_records(samplers: Iterable[Sampler], interval: float, *, stop: Callable[[], bool] = lambda: False,
                  sleep: Callable[[float], None] = time.sleep) -> Iterator[dict[str, Any]]:
    """A record per host each time it has a new sample or a new state (connecting, reconnecting, ...);
    never the same sample twice, so a host that is down writes one record saying so, not one a second. A
    SamplerSet is read again at each pass: a host put in since writes its records, an ended job's node its
    one job-ended record."""
    live = as_set(samplers)
    seen: dict[str, tuple[object, ...]] = {}
    while not stop():
        for sampler in live:
            snap = sampler.snapshot()
            key = (snap.state, snap.last_sample_t, snap.processes_t, snap.message)
            if seen.get(snap.host) != key:
                seen[snap.host] = key
                yield record(snap)
        sleep(interval)


# --- Prometheus -----------------------------------------------------------------------------------------

LOOPBACK_NAMES = ("localhost",)


def parse_bind(text: str, *, allow_public: bool = False) -> tuple[str, int]:
    """'127.0.0.1:9400', '[::1]:9400', ':9400' or '9400' -> (address, port). Only loopback unless
    allow_public; an unspecified address (0.0.0.0, ::) is never the default and needs allow_public too."""
    text = text.strip()
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = "", text
    host = host.strip("[]") or "127.0.0.1"
    try:
        port = int(port_text)
    except ValueError:
        raise BadBind(f"--prometheus {text!r}: the port is not a number", "e.g. --prometheus 127.0.0.1:9400") from None
    if not 1 <= port <= 65535:
        raise BadBind(f"--prometheus {text!r}: port {port} is out of range", "a port from 1 to 65535")
    if host in LOOPBACK_NAMES:
        return "127.0.0.1", port
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise BadBind(f"--prometheus {text!r}: {host!r} is not an IP address",
                      "give the address to listen on, e.g. 127.0.0.1:9400") from None
    if not address.is_loopback and not allow_public:
        raise BadBind(f"--prometheus {text!r} would serve GPU data beyond this machine",
                      "listen on 127.0.0.1 (scrape through a tunnel), or add --prometheus-public to mean it")
    return str(address), port


# dcgm-exporter's names (its default counters), with what each is in a sample.
DCGM_GAUGES: tuple[tuple[str, str, Callable[[GpuSample], float | None]], ...] = (
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", lambda g: g.util_pct),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", lambda g: g.mem_util_pct),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", lambda g: g.mem_used_mib),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).",
     lambda g: None if g.mem_total_mib is None or g.mem_used_mib is None else g.mem_total_mib - g.mem_used_mib),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", lambda g: g.power_w),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", lambda g: g.temp_c),
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", lambda g: g.sm_clock_mhz),
    ("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", lambda g: g.mem_clock_mhz),
    ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "Current clock throttle reasons (bitmask).", lambda g: g.throttle_mask),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "Total number of double-bit volatile ECC errors.",
     lambda g: g.ecc_uncorrected),
)
GPU_LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION")


class DcgmCollector:
    """A prometheus_client collector: at each scrape, every host's latest samples as dcgm-exporter names them.
    A host that is down exports no GPU series (stale values are not passed off as live) but says so in
    devenv_host_up; NA fields are left out, never exported as 0. A SamplerSet is read at each scrape: a new
    job's node appears, an ended job's node keeps only devenv_host_up{state="job-ended"} 0."""

    def __init__(self, samplers: Iterable[Sampler]):
        self.samplers = as_set(samplers)

    def describe(self) -> list[Metric]:
        return []  # unchecked collector: names come with each collect

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import GaugeMetricFamily

        snaps = [s.snapshot() for s in self.samplers]
        families = {name: GaugeMetricFamily(name, doc, labels=GPU_LABELS) for name, doc, _ in DCGM_GAUGES}
        up = GaugeMetricFamily("devenv_host_up", "1 while devenv samples the host's GPUs, else 0.",
                               labels=("Hostname", "state"))
        age = GaugeMetricFamily("devenv_sample_age_seconds", "Seconds since the host's last GPU sample.",
                                labels=("Hostname",))
        now = time.time()
        for snap in snaps:
            up.add_metric((snap.host, snap.state), 1.0 if snap.state == OK else 0.0)
            if snap.last_sample_t is not None:
                age.add_metric((snap.host,), max(0.0, now - snap.last_sample_t))
            if snap.state != OK:
                continue
            for gpu in snap.gpus:
                labels = (str(gpu.index), gpu.uuid or "", gpu.pci_bus_id or "",
                          f"nvidia{gpu.index}" if gpu.index is not None else "", gpu.name or "", snap.host,
                          gpu.driver_version or "")
                for name, _, value_of in DCGM_GAUGES:
                    value = value_of(gpu)
                    if value is not None:
                        families[name].add_metric(labels, float(value))
        yield from families.values()
        yield up
        yield age


def serve_prometheus(samplers: Iterable[Sampler], address: str, port: int) -> tuple[WSGIServer, threading.Thread]:
    """Serve /metrics on address:port in a daemon thread; returns (server, thread). Only our collector is
    registered (no process metrics of the laptop)."""
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry(auto_describe=False)
    registry.register(DcgmCollector(samplers))
    try:
        return start_http_server(port, addr=address, registry=registry)
    except OSError as e:
        raise BadBind(f"cannot listen on {address}:{port}: {e.strerror or e}",
                      "pick another port: --prometheus 127.0.0.1:PORT") from None
