"""The multi-node sanity verdict (L0): what scripts/multinode.py measured across a Slurm allocation, judged.

Correctness first (the all-reduce sums, the DDP replicas agreeing), then the bus bandwidth against the
interconnect found on the path (data/interconnects.yaml: each nominal figure with its source), then the
scaling efficiency of a DDP step from one node to N. What the run could not prove is said in words.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from devenv.checks.report import FAIL, INFO, PASS, SKIP, WARN, CheckResult

# The bundled tables (ours, plain YAML) through libyaml's safe loader where PyYAML has it: ~8x less CPU than the
# pure-Python SafeLoader, the same data (tests/test_profiles.py compares the two on every bundled table).
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

DATA = Path(__file__).parent / "data" / "interconnects.yaml"


@lru_cache(maxsize=1)
def table() -> dict[str, Any]:
    data: dict[str, Any] = yaml.load(DATA.read_text(), Loader=_LOADER)
    return data


@dataclass(frozen=True)
class Link:
    kind: str              # nvlink4 | nvlink3 | pcie4 | infiniband | ethernet | loopback | unknown | none
    name: str
    gbs: float | None      # nominal one-direction GB/s; None when unknown
    source: str
    detail: str = ""


@dataclass
class MultiNodeVerdict:
    status: str
    checks: list[CheckResult]
    not_proven: list[str] = field(default_factory=list)
    link: Link | None = None

    @property
    def ok(self) -> bool:
        return self.status != FAIL

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "checks": [c.to_dict() for c in self.checks], "not_proven": self.not_proven,
                "interconnect": self.link.__dict__ if self.link else None}


def _ib_gbs(rate: str | None) -> float | None:
    """'400 Gb/sec (4X NDR)' -> 50.0 GB/s."""
    m = re.match(r"\s*([\d.]+)\s*Gb/sec", rate or "")
    return float(m.group(1)) / 8 if m else None


def same_machine(nodes: list[dict[str, Any]]) -> bool:
    ids = {(n.get("machine_id"), n.get("boot_id")) for n in nodes}
    return len(nodes) > 1 and len(ids) == 1 and None not in next(iter(ids))


def find_link(nodes: list[dict[str, Any]], gpu: bool) -> Link:
    """The slowest link the all-reduce crossed: between machines the network, inside one the GPUs' link."""
    t = table()["links"]
    if same_machine(nodes):
        return Link("loopback", t["loopback"]["name"], None, t["loopback"]["source"],
                    f"{len(nodes)} Slurm nodes on one machine ({nodes[0].get('hostname')})")
    if len(nodes) > 1:
        active_ib = [p for n in nodes for p in n.get("ib") or []
                     if "ACTIVE" in (p.get("state") or "") and (p.get("link_layer") or "InfiniBand") == "InfiniBand"]
        per_node_ib = [[p for p in n.get("ib") or [] if p in active_ib] for n in nodes]
        if gpu and all(per_node_ib):
            slowest = min(_ib_gbs(p.get("rate")) or 0.0 for ports in per_node_ib for p in ports)
            return Link("infiniband", t["infiniband"]["name"], slowest or None, t["infiniband"]["source"],
                        f"{min(len(p) for p in per_node_ib)} active port(s) per node, "
                        f"{per_node_ib[0][0].get('rate')}")
        speeds = [max((nic.get("speed_mbps") or 0 for nic in n.get("nics") or [] if nic.get("state") == "up"),
                      default=0) for n in nodes]
        gbs = min(speeds) / 8000 if speeds and min(speeds) > 0 else None
        return Link("ethernet", t["ethernet"]["name"], gbs, t["ethernet"]["source"],
                    f"fastest up NIC per node: {', '.join(f'{s} Mb/s' if s > 0 else 'speed unknown' for s in speeds)}")
    node = nodes[0] if nodes else {}
    names = " ".join(node.get("gpus") or [])
    if gpu and (node.get("nvlink") or 0) > 0:
        for kind in ("nvlink4", "nvlink3"):
            if any(g in names for g in t[kind]["gpus"]):
                return Link(kind, t[kind]["name"], float(t[kind]["gbs"]), t[kind]["source"],
                            f"{node.get('nvlink')} active NVLink(s) on GPU 0")
        return Link("nvlink", "NVLink", None, "nvidia-smi nvlink -s", f"{node.get('nvlink')} active NVLink(s)")
    if gpu:
        return Link("pcie4", t["pcie4"]["name"], float(t["pcie4"]["gbs"]), t["pcie4"]["source"],
                    "no active NVLink: GPUs talk over PCIe (gen 4 assumed)")
    return Link("unknown", "one node (shared memory)", None, "", "")


def judge(multi: dict[str, Any] | None, single: dict[str, Any] | None, nodes_asked: int,
          error: str | None = None) -> MultiNodeVerdict:
    """Every multi-node check from the two phases' results (None where a phase produced none)."""
    if multi is None:
        return MultiNodeVerdict(FAIL, [CheckResult("multinode.run", "Multi-node run", FAIL,
                                                   error or "the run produced no result",
                                                   "read the job's log (its path is above)")],
                                ["nothing: the run did not finish"])
    checks: list[CheckResult] = []
    not_proven: list[str] = []
    gpu = multi.get("backend") == "nccl"
    nodes = multi.get("nodes") or []
    world = int(multi.get("world_size") or 0)
    names = ", ".join(n.get("node") or n.get("hostname") or "?" for n in nodes)
    checks.append(CheckResult("multinode.ranks", "Ranks across nodes", PASS if len(nodes) == nodes_asked else FAIL,
                              f"{world} rank(s) on {len(nodes)} node(s) ({names}), "
                              f"backend {multi.get('backend')}, torch {multi.get('torch')}",
                              None if len(nodes) == nodes_asked else f"{nodes_asked} node(s) asked: the rendezvous "
                              "did not gather every node"))
    ar = multi.get("allreduce") or {}
    checks.append(CheckResult("multinode.allreduce", "All-reduce correctness", PASS if ar.get("ok") else FAIL,
                              f"exact sums on every rank over {ar.get('elements', '?')} elements" if ar.get("ok")
                              else f"wrong sums (constant: {ar.get('constant_sum')}, random: {ar.get('random_sum')})",
                              None if ar.get("ok") else "a rank computes wrong results: suspect its GPU or its "
                              "link; run `devenv sanity` on each node alone"))
    ddp = multi.get("ddp") or {}
    agree = ddp.get("replicas_agree")
    first, last = float(ddp.get("loss_first", float("nan"))), float(ddp.get("loss_last", float("nan")))
    finite = math.isfinite(first) and math.isfinite(last)
    checks.append(CheckResult("multinode.ddp", "DDP step (GPT-style)", PASS if agree and finite else FAIL,
                              f"{ddp.get('params', 0) / 1e6:.1f} M parameters, {ddp.get('step_ms', 0):.0f} ms/step, "
                              f"loss {first:.3f} -> {last:.3f}, "
                              f"replicas {'agree' if agree else 'DIFFER'}",
                              None if agree and finite else "the replicas drifted apart or the loss is not finite"))

    # one rank crossed no link: naming one (PCIe by default on a GPU node) would claim a path never taken
    link = find_link(nodes, gpu) if world > 1 else Link("none", "none (one rank)", None, "",
                                                        "the all-reduce had one rank: it crossed no link")
    if world <= 1:  # busbw = algbw x 2(n-1)/n is 0 for one rank: nothing crossed any link, so nothing to judge
        checks.append(CheckResult("multinode.busbw", "All-reduce bus bandwidth", SKIP,
                                  "one rank: the all-reduce crossed no link (busbw = algbw x 2(n-1)/n = 0)"))
        not_proven.append("one rank: no interconnect was tested (it takes two GPUs or two nodes)")
    else:
        checks.append(_bandwidth(multi.get("busbw") or [], link, gpu))
    if not gpu:
        not_proven.append("CPU only: no GPU interconnect was tested (gloo over TCP; NCCL, NVLink and "
                          "InfiniBand were not exercised)")
    if link.kind == "loopback":
        not_proven.append(f"the nodes share one machine ({nodes[0].get('hostname') if nodes else '?'}): their "
                          "traffic never crossed a network, so no network bandwidth was proven")
    elif link.gbs is None and link.kind != "none":
        not_proven.append(f"{link.name}: its nominal bandwidth is unknown, so the bandwidth was measured, not judged")
    checks.append(_scaling(multi, single, link, not_proven))
    worst = FAIL if any(c.status == FAIL for c in checks) else WARN if any(c.status == WARN for c in checks) else PASS
    return MultiNodeVerdict(worst, checks, not_proven, link)


def _bandwidth(rows: list[dict[str, Any]], link: Link, gpu: bool) -> CheckResult:
    title = "All-reduce bus bandwidth"
    if not rows:
        return CheckResult("multinode.busbw", title, FAIL, "not measured", "read the job's log")
    best = max(rows, key=lambda r: r["busbw_gbs"])
    seen = (f"{best['busbw_gbs']:.2f} GB/s busbw at {best['bytes'] / 2**20:.0f} MiB "
            f"(algbw {best['algbw_gbs']:.2f} GB/s; busbw = algbw x 2(n-1)/n, nccl-tests); path: {link.name}"
            + (f" ({link.detail})" if link.detail else ""))
    details: dict[str, Any] = {"rows": rows, "link": link.__dict__}
    if not gpu or link.gbs is None:
        return CheckResult("multinode.busbw", title, INFO, seen + ("; not judged: gloo on CPUs is no measure of "
                           "the interconnect" if not gpu else "; not judged: nominal bandwidth unknown"),
                           None, details)
    rule = table()["rule"]
    fraction = best["busbw_gbs"] / link.gbs
    details.update(fraction=fraction, nominal_gbs=link.gbs, source=link.source, rule=rule)
    judged = f"{seen}: {fraction:.0%} of {link.gbs:.0f} GB/s nominal ({link.source})"
    if fraction >= rule["pass_fraction"]:
        return CheckResult("multinode.busbw", title, PASS, judged, None, details)
    status = WARN if fraction >= rule["fail_fraction"] else FAIL
    hint = ("NCCL may not be using the fast path: run with NCCL_DEBUG=INFO and look for NET/IB (InfiniBand) vs "
            "NET/Socket (TCP); check NCCL_IB_HCA / NCCL_SOCKET_IFNAME and that the job is alone on the link")
    return CheckResult("multinode.busbw", title, status, judged + f" (below {rule['pass_fraction']:.0%}: "
                       f"{rule['source']})", hint, details)


def _scaling(multi: dict[str, Any], single: dict[str, Any] | None, link: Link, not_proven: list[str]) -> CheckResult:
    title = "Scaling efficiency (DDP step, 1 node -> N)"
    nodes = len(multi.get("nodes") or []) or 1
    one = ((single or {}).get("ddp") or {}).get("tokens_per_s")
    many = (multi.get("ddp") or {}).get("tokens_per_s")
    if nodes == 1:  # the "multi" phase ran on the one node the baseline ran on: a ratio of noise
        return CheckResult("multinode.scaling", title, SKIP, "one node: there is no scaling across nodes to judge")
    if not one or not many:
        not_proven.append("scaling: the one-node baseline did not run")
        return CheckResult("multinode.scaling", title, SKIP, "no one-node baseline")
    rule = table()["scaling"]
    efficiency = many / (nodes * one)
    seen = (f"{efficiency:.0%}: {many:,.0f} tokens/s on {nodes} nodes vs {one:,.0f} on 1 "
            f"(weak scaling, the same batch per rank)")
    details = {"efficiency": efficiency, "tokens_per_s_1": one, "tokens_per_s_n": many, "rule": rule}
    if link.kind == "loopback":
        return CheckResult("multinode.scaling", title, INFO, seen + "; not judged: the nodes share one machine's "
                           "CPUs", None, details)
    if efficiency >= rule["pass_efficiency"]:
        return CheckResult("multinode.scaling", title, PASS, seen, None, details)
    status = WARN if efficiency >= rule["warn_efficiency"] else FAIL
    return CheckResult("multinode.scaling", title, status, seen + f" (below {rule['pass_efficiency']:.0%}: "
                       f"{rule['source']})", "the interconnect holds the step back: compare the bus bandwidth "
                       "above with the link's nominal figure", details)
