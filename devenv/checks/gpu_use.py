"""`devenv check`: each GPU free or busy, and by whom; whether the environment's `gpus:` can be met (L0).

Judged from one occupancy frame (devenv.gpu.occupancy) run in the check's batch, with the host's container
names after it. A busy GPU is a warning for an environment that takes all (or named) GPUs; for one that asks
for N free GPUs, fewer free than N fails, unless busy ones may be taken (`up --allow-busy`).
"""

from __future__ import annotations

from dataclasses import replace

from devenv.checks.report import FAIL, INFO, PASS, SKIP, WARN, CheckResult
from devenv.gpu import choose as gpu_choose
from devenv.gpu.occupancy import occupancy_script, parse_occupancy

NAMES_SCRIPT = ("{ docker ps --no-trunc --format '{{.ID}} {{.Names}}' 2>/dev/null || "
                "podman ps --no-trunc --format '{{.ID}} {{.Names}}' 2>/dev/null; } | "
                "while read -r i n; do echo \"@name $i $n\"; done")


def probe(nvidia_smi: str = "nvidia-smi") -> str:
    return f"{occupancy_script(nvidia_smi)}\n{NAMES_SCRIPT}\nexit 0"


def _names(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "@name":
            out[parts[1][:12]] = parts[2]
    return out


def judge_gpu_use(stdout: str, gpus: str, *, allow_busy: bool = False, host: str = "the host",
                  t: float = 0.0, unhealthy: dict[int, str] | None = None) -> list[CheckResult]:
    """One result per GPU (free / busy with whom) and, for gpus: N, whether N free ones are there (the
    UNHEALTHY GPUs, index -> finding, left out and named)."""
    occ = parse_occupancy(stdout, t)
    if not occ.gpus:
        return []  # the driver check already says why there is no GPU
    names = _names(stdout)
    states = [replace(s, others=tuple(replace(o, container=names.get(o.container, o.container)) if o.container
                                      else o for o in s.others))
              for s in gpu_choose.gpu_states(occ)]
    states = gpu_choose.mark_unhealthy(states, unhealthy or {})
    wanted = gpu_choose.indices_of(gpus)
    results = []
    for s in states:
        named = wanted is None or s.index in wanted
        status = PASS if s.free else (WARN if named and gpus != "none" else INFO)
        plain = replace(s, unhealthy=None)  # its use; its health has its own line
        value = plain.describe().split(" is ", 1)[1]  # "free (0% util, 0 MiB used)" / "busy with pid 820 (...)"
        remedy = None
        if not s.free and status == WARN:
            remedy = ("another process uses this GPU: speed is shared (`devenv sanity` will not judge it); "
                      "pick free GPUs with `gpus: N` in the profile or `--gpus`")
        results.append(CheckResult(f"gpu.{s.index}.use", f"GPU {s.index} use", status, value, remedy, s.to_dict()))
    count = gpu_choose.count_of(gpus)
    if count is not None:
        title = f"{count} free GPU{'s' if count > 1 else ''}"
        try:
            choice = gpu_choose.choose(states, count, host=host, allow_busy=allow_busy)
        except gpu_choose.NotEnoughFreeGpus as e:
            results.append(CheckResult("gpu.choice", title, FAIL, e.message, e.hint))
        else:
            busy = f"; busy taken anyway: {', '.join(str(s.index) for s in choice.busy_taken)}" \
                if choice.busy_taken else ""
            busy += "".join(f"; skipped {s.describe()}" for s in choice.skipped)
            results.append(CheckResult("gpu.choice", title, WARN if choice.busy_taken else PASS,
                                       f"would pick GPU {choice.gpus}{busy}", None,
                                       {"indices": list(choice.indices)}))
    elif gpus == "none":
        results.append(CheckResult("gpu.choice", "GPUs", SKIP, "this environment asks for no GPU"))
    return results
