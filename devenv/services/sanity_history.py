"""Saved sanity reports (state_dir()/sanity/<host>/<UTC timestamp>.json, 0600) and comparisons between runs.

A saved record is {"host", "saved_at", "suite", "verdict": Verdict.to_dict(), "report": <program report>}.
compare() turns two records (this run vs the last one, or host A vs host B) into a diff table model.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from dataclasses import dataclass
from pathlib import Path

from devenv.config.paths import state_dir, write_private
from devenv.errors import DevenvError
from devenv.sanity.verdict import Json, Verdict, num

CHANGE_NOTE = 0.10  # a change under 10% is within run-to-run noise for these short measurements


def history_dir(host: str) -> Path:
    return state_dir() / "sanity" / _safe(host)


def _safe(host: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", host).strip(".")
    return cleaned or "_"


def save_report(host: str, report: Json, verdict: Verdict, *, suite: str | None = None,
                when: _dt.datetime | None = None) -> Path:
    when = (when or _dt.datetime.now(_dt.timezone.utc)).astimezone(_dt.timezone.utc)
    record = {"host": host, "saved_at": when.isoformat(timespec="seconds"),
              "suite": suite or report.get("suite"), "verdict": verdict.to_dict(), "report": report}
    directory = history_dir(host)
    # fixed width, so names sort in time order; microseconds keep two quick saves apart
    path = directory / f"{when.strftime('%Y%m%dT%H%M%S.%f')}Z.json"
    while path.exists():
        when += _dt.timedelta(microseconds=1)
        path = directory / f"{when.strftime('%Y%m%dT%H%M%S.%f')}Z.json"
    write_private(path, json.dumps(record, indent=1, default=str) + "\n")
    return path


def list_reports(host: str) -> list[Path]:
    """Saved reports of `host`, oldest first."""
    directory = history_dir(host)
    if not directory.is_dir():
        return []
    return sorted(directory.glob("*.json"))


def load_report(path: Path) -> Json:
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise DevenvError(f"cannot read saved sanity report {path}: {exc}",
                          "delete the file; the next `devenv sanity` saves a fresh one") from None
    if not isinstance(record, dict) or "report" not in record:
        raise DevenvError(f"{path} is not a saved sanity report", "delete the file")
    return record


def last_report(host: str, *, before: Path | None = None) -> Json | None:
    """The newest saved record of `host` (older than `before` when given), or None."""
    paths = list_reports(host)
    if before is not None:
        paths = [p for p in paths if p.name < Path(before).name]
    return load_report(paths[-1]) if paths else None


# ----------------------------------------------------------------------------------- comparison
@dataclass(frozen=True)
class DiffRow:
    metric: str  # "matmul bf16", "GPT bf16 throughput", ...
    unit: str
    a: float | None
    b: float | None
    higher_is_better: bool

    @property
    def ratio(self) -> float | None:
        if self.a in (None, 0) or self.b is None:
            return None
        return self.b / self.a

    @property
    def change(self) -> str:
        """better | worse | same | new | gone (b relative to a)."""
        if self.a is None and self.b is not None:
            return "new"
        if self.b is None:
            return "gone"
        r = self.ratio
        if r is None or abs(r - 1.0) <= CHANGE_NOTE:
            return "same"
        return "better" if (r > 1.0) == self.higher_is_better else "worse"


@dataclass(frozen=True)
class Comparison:
    a_label: str
    b_label: str
    rows: tuple[DiffRow, ...]
    notes: tuple[str, ...]

    def worse(self) -> list[DiffRow]:
        return [r for r in self.rows if r.change == "worse"]


def metrics(report: Json) -> dict[str, tuple[float | None, str, bool]]:
    """The comparable numbers of one program report: name -> (value, unit, higher_is_better)."""
    out: dict[str, tuple[float | None, str, bool]] = {}
    train: dict[tuple[object, object, object], Json] = {}  # (model, workload, mode) -> its result
    for r in report.get("results") or []:
        if not isinstance(r, dict) or r.get("error") or r.get("skipped"):
            continue
        kind = r.get("kind")
        gpu = r.get("gpu")
        where = f" (GPU {gpu})" if isinstance(gpu, int) and gpu > 0 else ""
        if kind == "matmul":
            out[f"matmul {r.get('dtype')}{where}"] = (num(r.get("tflops")), "TFLOP/s", True)
        elif kind == "bandwidth":
            out[f"device copy{where}"] = (num(r.get("gbps")), "GB/s", True)
        elif kind == "allreduce":
            out["all-reduce bus bandwidth"] = (num(r.get("busbw_gbs")), "GB/s", True)
        elif kind == "train":
            mode = r.get("mode", "?") + (" + compile" if r.get("compiled") else "")
            mode += f" DDP x{r.get('world_size')}" if r.get("ddp") else ""
            name = f"{r.get('model')} {mode} [{r.get('workload')}]"
            out[f"{name} throughput"] = (num(r.get("throughput")), r.get("throughput_unit", ""), True)
            if r.get("peak_mem_bytes"):
                out[f"{name} peak memory"] = (r["peak_mem_bytes"] / 2**30, "GiB", False)
            if not r.get("compiled") and not r.get("ddp"):
                train[(r.get("model"), r.get("workload"), r.get("mode"))] = r
    for (model, workload, mode), r in train.items():
        base = train.get((model, workload, "fp32"))
        if mode not in ("fp16", "bf16") or not base:
            continue
        step, base_step = num(r.get("step_ms")), num(base.get("step_ms"))
        if step and base_step:
            out[f"{model} {mode} AMP speedup vs fp32 [{workload}]"] = (base_step / step, "x", True)
    return out


def _label(record: Json) -> str:
    fp = (record.get("report") or {}).get("fingerprint") or {}
    gpu = fp.get("gpu_name") or "CPU"
    return f"{record.get('host', '?')} {record.get('saved_at', '')} ({gpu}, torch {fp.get('torch', '?')})".strip()


def compare(a: Json, b: Json) -> Comparison:
    """Diff two saved records (or {"report": ...} dicts): b relative to a, metric by metric."""
    ma, mb = metrics(a.get("report") or {}), metrics(b.get("report") or {})
    rows = []
    for name in list(ma) + [n for n in mb if n not in ma]:
        va, unit, hib = ma.get(name, (None, "", True))
        vb, unit_b, hib_b = mb.get(name, (None, unit, hib))
        rows.append(DiffRow(metric=name, unit=unit or unit_b, a=va, b=vb,
                            higher_is_better=hib if name in ma else hib_b))
    notes = []
    fa = (a.get("report") or {}).get("fingerprint") or {}
    fb = (b.get("report") or {}).get("fingerprint") or {}
    for key in ("gpu_name", "torch", "torch_cuda", "driver", "cudnn"):
        if fa.get(key) != fb.get(key):
            notes.append(f"{key}: {fa.get(key)} -> {fb.get(key)}")
    if a.get("suite") != b.get("suite"):
        notes.append(f"suite: {a.get('suite')} -> {b.get('suite')} (shapes differ; compare like with like)")
    return Comparison(a_label=_label(a), b_label=_label(b), rows=tuple(rows), notes=tuple(notes))
