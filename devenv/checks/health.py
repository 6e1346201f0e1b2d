"""`devenv check`'s health section: is each GPU sick (L0: pure, judged from recorded outputs in tests).

Read from `nvidia-smi -q` (devenv.gpu.health) and the kernel's log (Xid lines of `dmesg`, else `journalctl -k`).
A finding names the exact field it read and a remedy. A fault that makes work on the GPU wrong or doomed
(uncorrectable ECC errors since the driver loaded, a pending page retirement or row remap, a failed remap, a
recovery action the driver asks for, a fatal Xid, a lost GPU, hardware slowdown on an idle GPU) is FAIL with
details["unhealthy"] = True: the report's verdict is UNHEALTHY (exit 7, README). What slows or warns but does
not corrupt (a link trained down under load, past errors, persistence off) is WARN. docs/health.md has the table.
"""

from __future__ import annotations

from devenv.checks.report import FAIL, INFO, NO_GPU, PASS, SKIP, WARN, CheckResult, Status
from devenv.gpu import nvsmi
from devenv.gpu.health import GpuHealth, Xid, parse_health, parse_xids, same_gpu

EXIT_UNHEALTHY = 7
# A GPU is judged "under load" (links and clocks as work sees them) from this utilisation on.
LOAD_UTIL_PCT = 50
# The kernel log lines devenv reads: dmesg first (restricted to root on many hosts: kernel.dmesg_restrict=1),
# then the journal (the adm / systemd-journal groups may read it). Marks say which answered.
XID_PROBE = (
    "if out=$(dmesg 2>&1); then echo '@log dmesg'; printf '%s\\n' \"$out\" | grep -i 'NVRM: Xid' | tail -n 200; "
    "elif command -v journalctl >/dev/null 2>&1 && jout=$(journalctl -k -q --no-pager -o cat 2>&1) "
    "&& [ -n \"$jout\" ]; then echo '@log journalctl'; printf '%s\\n' \"$jout\" | grep -i 'NVRM: Xid' | tail -n 200; "
    "else echo \"@unreadable ${out:-no dmesg}\" | head -n 1; fi; exit 0"
)

# Xids that mean the GPU needs a reset (or the host a reboot, or the board a replacement): NVIDIA's Xid
# catalog ("XID Errors", docs.nvidia.com/deploy/xid-errors): 48 double-bit ECC, 61/62 internal
# micro-controller halt, 64 row-remap failure, 74 NVLink error, 79 fallen off the bus, 95 uncontained ECC,
# 119/120 GSP RPC timeout / error, 140 unrecovered ECC, 154 recovery action changed.
FATAL_XIDS = {48: "double-bit ECC error", 61: "internal micro-controller breakpoint",
              62: "internal micro-controller halt", 64: "ECC row-remapping failure", 74: "NVLink error",
              79: "GPU has fallen off the bus", 95: "uncontained ECC error", 119: "GSP RPC timeout",
              120: "GSP error", 140: "unrecovered ECC error", 154: "GPU recovery action changed"}
# Xids worth a look that do not doom the GPU: 63 a page retirement / row remap was recorded (the remap
# fields say whether a reset is pending), 92 high single-bit ECC rate, 94 contained ECC error (the
# application that hit it was stopped; the GPU goes on).
WARN_XIDS = {63: "ECC page retirement or row remap recorded", 92: "high single-bit ECC error rate",
             94: "contained ECC error (the application that hit it was stopped)"}
RESET = ("drain the GPU of work and reset it (`sudo nvidia-smi -r -i {index}` with no process on it), or reboot "
         "the host")


def health_probe() -> str:
    """`nvidia-smi -q` of every GPU, cut off like every nvidia-smi call (a wedged driver hangs it)."""
    return nvsmi.preamble() + "command -v nvidia-smi >/dev/null 2>&1 || exit 127; nvidia_smi -q 2>&1"


def judge_health(query: str, query_exit: int, log: str | None, *, under_load: bool | None = None,
                 uuids: list[str] | None = None) -> list[CheckResult]:
    """The health section: findings per GPU, then the kernel log's Xids. under_load: True when the caller knows
    the GPUs were under load (sanity's sample); None: judged per GPU from its utilisation in the same output.
    uuids: only these GPUs (a sanity run's)."""
    if query_exit != 0:
        what, remedy = nvsmi.explain_failure(query, query_exit)
        lost = "lost" in what or "did not answer" in what
        return [CheckResult("gpu.health", "GPU health", FAIL if lost else SKIP,
                            f"`nvidia-smi -q`: {what}", remedy, {"unhealthy": lost})]
    gpus = parse_health(query)
    if uuids is not None:
        gpus = [g for g in gpus if g.uuid in uuids]
    results: list[CheckResult] = []
    for gpu in gpus:
        results += judge_gpu(gpu, under_load)
    if log is not None:
        results.append(judge_xids(log, gpus))
    return results


def health_section(query: str, query_exit: int, log: str | None, has_gpu: bool, env_gpus: str,
                   where: str) -> list[CheckResult]:
    """The health section of a machine that is checked as a whole (a Slurm compute node, through the probe job):
    its GPUs judged as judge_health does, or, where there is no GPU, one line saying so (nothing about a GPU's
    health was judged, and that is not a failure). An environment that asks for no GPU is not failed by a sick
    one: its findings are WARN (spare)."""
    if not has_gpu:
        return [CheckResult("gpu.health", "GPU health", NO_GPU, f"no GPU on {where}: no GPU health to judge", None,
                            {"unhealthy": False})]
    results = judge_health(query, query_exit, log)
    if env_gpus == "none":
        results = spare(results, set(sick_gpus(results)), "not used: this environment asks for no GPU")
    return results


def _finding(gpu: GpuHealth, what: str, status: Status, path: str, value: object, remedy: str | None,
             unhealthy: bool = False) -> CheckResult:
    label = f"GPU {gpu.index}" if gpu.index is not None else f"GPU {gpu.bus_id}"
    return CheckResult(f"gpu.{gpu.index}.health.{what}", f"{label} health", status, f"{path}: {value}",
                       remedy.format(index=gpu.index if gpu.index is not None else 0) if remedy else None,
                       {"field": path, "value": value, "unhealthy": unhealthy, "bus_id": gpu.bus_id,
                        "uuid": gpu.uuid})


def judge_gpu(gpu: GpuHealth, under_load: bool | None = None) -> list[CheckResult]:
    """Every finding on one GPU, or one PASS that says what was read."""
    out: list[CheckResult] = []
    bad = out.append
    for f in gpu.lost:
        bad(_finding(gpu, "lost", FAIL, f.path, f.value, "the driver cannot reach this GPU: look for Xid 79 in "
                     "the kernel log; reset it (`sudo nvidia-smi -r -i {index}`) or reboot the host", True))
    if gpu.recovery_action and gpu.recovery_action.lower() not in ("none",):
        bad(_finding(gpu, "recovery", FAIL, "GPU Recovery Action", gpu.recovery_action,
                     f"the driver asks for: {gpu.recovery_action}; {RESET}", True))
    if gpu.volatile_uncorrectable:
        bad(_finding(gpu, "ecc", FAIL, "ECC Errors > Volatile (uncorrectable)", gpu.volatile_uncorrectable,
                     "uncorrectable memory errors since the driver loaded: results on this GPU may be wrong; "
                     + RESET + "; if they come back, the board needs replacing (RMA)", True))
    elif gpu.aggregate_uncorrectable:
        bad(_finding(gpu, "ecc", WARN, "ECC Errors > Aggregate (uncorrectable)", gpu.aggregate_uncorrectable,
                     "uncorrectable errors in the GPU's past (none since the driver loaded): watch the volatile "
                     "count; repeated errors mean replacing the board"))
    if gpu.sram_threshold_exceeded:
        bad(_finding(gpu, "sram", WARN, "ECC Errors > Aggregate > SRAM Threshold Exceeded", "Yes",
                     "the GPU's SRAM error count passed NVIDIA's threshold: plan to replace the board (RMA)"))
    if gpu.retired_pending:
        bad(_finding(gpu, "retired-pages", FAIL, "Retired Pages > Pending Page Blacklist", "Yes",
                     "a memory page waits to be retired, which takes effect at the next reset: " + RESET, True))
    elif gpu.retired_dbe:
        bad(_finding(gpu, "retired-pages", WARN, "Retired Pages > Double Bit ECC", gpu.retired_dbe,
                     "pages retired after double-bit errors; near 64 retired pages the board should be replaced"))
    if gpu.remap_failure:
        bad(_finding(gpu, "row-remap", FAIL, "Remapped Rows > Remapping Failure Occurred", "Yes",
                     "a memory row could not be remapped: the board needs replacing (RMA); until then keep work "
                     "off it", True))
    elif gpu.remap_pending:
        bad(_finding(gpu, "row-remap", FAIL, "Remapped Rows > Pending", "Yes",
                     "a row remap waits for the next reset (the bad row is still in use): " + RESET, True))
    elif gpu.remap_banks_none or gpu.remap_banks_low:
        which = "None" if gpu.remap_banks_none else "Low"
        bad(_finding(gpu, "row-remap", WARN, f"Remapped Rows > Bank Remap Availability Histogram > {which}",
                     f"{gpu.remap_banks_none or gpu.remap_banks_low} bank(s)",
                     "banks with few or no spare rows left: the next errors there cannot be remapped; plan an RMA"))
    if gpu.ecc_mode == "Disabled":
        bad(_finding(gpu, "ecc-mode", WARN, "ECC Mode > Current", "Disabled",
                     "memory errors go undetected: `sudo nvidia-smi -i {index} -e 1`, then reset or reboot"))
    elif gpu.ecc_pending and gpu.ecc_mode and gpu.ecc_pending != gpu.ecc_mode:
        bad(_finding(gpu, "ecc-mode", WARN, "ECC Mode > Pending", gpu.ecc_pending,
                     f"ECC changes from {gpu.ecc_mode} to {gpu.ecc_pending} at the next reset or reboot"))
    loaded = under_load if under_load is not None else (gpu.util_pct or 0) >= LOAD_UTIL_PCT
    hardware = [s for s in gpu.slowdowns if s.startswith("HW")]
    if hardware and not loaded:
        bad(_finding(gpu, "clocks", FAIL, "Clocks Event Reasons", ", ".join(hardware) + " active on an idle GPU",
                     "hardware holds the clocks down with no work on the GPU (a power-supply, power-brake or "
                     "cooling fault): check the board's power cables and fans, the host's BMC log; " + RESET,
                     True))
    elif gpu.slowdowns:
        bad(_finding(gpu, "clocks", WARN, "Clocks Event Reasons", ", ".join(gpu.slowdowns) + " active",
                     "clocks slowed by heat or power, not by the work: check cooling (fans, airflow, inlet "
                     "temperature) and power delivery; speed measured now is lower than the GPU's"))
    out += _judge_link(gpu, loaded)
    if gpu.persistence == "Disabled":
        bad(_finding(gpu, "persistence", WARN, "Persistence Mode", "Disabled",
                     "the driver unloads between jobs (slow first call, lost state): run nvidia-persistenced "
                     "(`sudo systemctl enable --now nvidia-persistenced`) or `sudo nvidia-smi -pm 1`"))
    if not [r for r in out if r.status in (FAIL, WARN)]:
        out.append(_healthy(gpu, loaded, out))
    return out


def _judge_link(gpu: GpuHealth, loaded: bool) -> list[CheckResult]:
    if None in (gpu.link_gen, gpu.link_gen_max, gpu.link_width, gpu.link_width_max):
        return []
    assert gpu.link_gen is not None and gpu.link_gen_max is not None   # for mypy: checked just above
    assert gpu.link_width is not None and gpu.link_width_max is not None
    down = gpu.link_gen < gpu.link_gen_max or gpu.link_width < gpu.link_width_max
    seen = f"Gen{gpu.link_gen} x{gpu.link_width} of Gen{gpu.link_gen_max} x{gpu.link_width_max}"
    if not down:
        return []
    if not loaded:
        return [_finding(gpu, "pcie", INFO, "PCI > GPU Link Info", seen + " (idle: not judged)",
                         "links train down when idle; `devenv sanity` judges the link under load")]
    return [_finding(gpu, "pcie", WARN, "PCI > GPU Link Info", seen + " under load",
                     "the PCIe link trained below its maximum while working (host<->GPU copies are slower): reseat "
                     "the card or riser, check the slot's BIOS setting (Gen, bifurcation) and the link's errors "
                     "(`sudo lspci -vv`, Replays Since Reset in `nvidia-smi -q`)")]


def _healthy(gpu: GpuHealth, loaded: bool, infos: list[CheckResult]) -> CheckResult:
    parts = []
    if gpu.ecc_mode:
        parts.append(f"ECC {gpu.ecc_mode.lower()}, {gpu.volatile_uncorrectable or 0} uncorrectable")
    if gpu.remap_pending is not None:
        parts.append("no row remap pending")
    elif gpu.retired_pending is not None:
        parts.append("no page retirement pending")
    if gpu.link_gen is not None and gpu.link_width is not None and not infos:
        parts.append(f"PCIe Gen{gpu.link_gen} x{gpu.link_width}" + ("" if loaded else " (idle)"))
    parts.append("no hardware slowdown")
    if gpu.persistence:
        parts.append(f"persistence {gpu.persistence.lower()}")
    label = f"GPU {gpu.index}" if gpu.index is not None else f"GPU {gpu.bus_id}"
    return CheckResult(f"gpu.{gpu.index}.health", f"{label} health", PASS, ", ".join(parts), None,
                       {"unhealthy": False, "uuid": gpu.uuid, "bus_id": gpu.bus_id})


def judge_xids(log: str, gpus: list[GpuHealth]) -> CheckResult:
    """The Xid errors in the kernel's log since boot, or why the log could not be read."""
    title = "GPU Xid errors"
    head = log.splitlines()[0] if log.strip() else "@unreadable no answer"
    if head.startswith("@unreadable"):
        why = head.partition(" ")[2].strip() or "no kernel log"
        return CheckResult("gpu.xid", title, INFO, f"not read: {why}",
                           "devenv reads `dmesg` or `journalctl -k` as your user: allow it with `sudo sysctl "
                           "kernel.dmesg_restrict=0`, or add the user to the adm / systemd-journal group",
                           {"readable": False, "why": why})
    source = head.partition(" ")[2].strip() or "dmesg"
    xids = parse_xids(log)
    mine = [x for x in xids if not gpus or any(same_gpu(x.bus_id, g.bus_id) for g in gpus)]
    details = {"readable": True, "source": source, "xids": [x.to_dict() for x in mine]}
    if not mine:
        return CheckResult("gpu.xid", title, PASS, f"none in the kernel log since boot ({source})", None, details)
    fatal = [x for x in mine if x.code in FATAL_XIDS]
    warn = [x for x in mine if x.code in WARN_XIDS]
    worst = (fatal or warn or mine)[-1]
    meaning = FATAL_XIDS.get(worst.code) or WARN_XIDS.get(worst.code) or "an application or driver error"
    where = _gpu_of(worst, gpus)
    codes = ", ".join(str(c) for c in dict.fromkeys(x.code for x in mine))
    value = f"{len(mine)} Xid line(s) since boot ({source}; codes {codes}); last telling: Xid {worst.code} " \
            f"on {where}: {meaning}"
    if fatal:
        return CheckResult("gpu.xid", title, FAIL, value,
                           f"{RESET.format(index=_index_of(worst, gpus))}; if it repeats after the reset, the board "
                           "needs replacing (RMA); a reset since these lines clears the need",
                           {**details, "unhealthy": True})
    if warn:
        return CheckResult("gpu.xid", title, WARN, value, "watch the ECC fields of `nvidia-smi -q`; restart the "
                           "application that was stopped", details)
    return CheckResult("gpu.xid", title, INFO, value, None, details)


def _gpu_of(xid: Xid, gpus: list[GpuHealth]) -> str:
    gpu = next((g for g in gpus if same_gpu(xid.bus_id, g.bus_id)), None)
    return f"GPU {gpu.index} ({xid.bus_id})" if gpu else f"PCI {xid.bus_id}"


def _index_of(xid: Xid, gpus: list[GpuHealth]) -> int:
    gpu = next((g for g in gpus if same_gpu(xid.bus_id, g.bus_id)), None)
    return gpu.index if gpu and gpu.index is not None else 0


def unhealthy(results: list[CheckResult]) -> list[CheckResult]:
    """The findings that make a GPU UNHEALTHY."""
    return [r for r in results if r.status == FAIL and r.details.get("unhealthy")]



# --- the PCIe link under load (sanity samples it while its run works the GPU) -------------------------------

LINK_FIELDS = ("uuid", "utilization.gpu", "pcie.link.gen.current", "pcie.link.gen.max", "pcie.link.width.current",
               "pcie.link.width.max")
LINK_MARK = "@links"


def link_probe() -> str:
    """The links' generation and width now, with the utilisation that says whether the GPU works."""
    return (f'l=$({nvsmi.CALL} --query-gpu={",".join(LINK_FIELDS)} --format=csv,noheader,nounits 2>&1); '
            f'echo "{LINK_MARK} $?"; printf \'%s\\n\' "$l"')


def judge_links(tails: list[str], uuids: list[str] | None, index_of: dict[str, int | None]) -> list[CheckResult]:
    """Per GPU of the run: the best link seen while it was under load (LOAD_UTIL_PCT) against its maximum; a GPU
    never under load in the samples is not judged (links train down when idle)."""
    best: dict[str, tuple[int, int, int, int]] = {}
    for tail in tails:
        rows: list[str] = []
        ok = False
        for line in tail.splitlines():
            if line.startswith(LINK_MARK):
                ok = line.split()[-1] == "0"
            elif ok:
                rows.append(line)
        for row in nvsmi.parse_csv("\n".join(rows), LINK_FIELDS):
            uuid = row["uuid"]
            util, gen, gen_max, width, width_max = (nvsmi.to_int(row[f]) for f in LINK_FIELDS[1:])
            if (not uuid or (uuids is not None and uuid not in uuids) or util is None or util < LOAD_UTIL_PCT
                    or None in (gen, gen_max, width, width_max)):
                continue
            assert gen is not None and gen_max is not None and width is not None and width_max is not None
            old = best.get(uuid, (0, gen_max, 0, width_max))
            best[uuid] = (max(old[0], gen), gen_max, max(old[2], width), width_max)
    out = []
    for uuid, (gen, gen_max, width, width_max) in best.items():
        index = index_of.get(uuid)
        label = f"GPU {index}" if index is not None else f"GPU {uuid}"
        seen = f"Gen{gen} x{width} of Gen{gen_max} x{width_max} under load"
        details = {"field": "pcie.link.gen.current / pcie.link.width.current", "uuid": uuid, "unhealthy": False}
        if gen < gen_max or width < width_max:
            out.append(CheckResult(f"gpu.{index}.health.pcie", f"{label} health", WARN, f"PCIe link: {seen}",
                                   "the link trained below its maximum while working: reseat the card or riser, "
                                   "check the slot's BIOS setting (Gen, bifurcation) and `sudo lspci -vv`", details))
        else:
            out.append(CheckResult(f"gpu.{index}.health.pcie", f"{label} health", PASS, f"PCIe link: {seen}",
                                   None, details))
    return out


def sick_gpus(results: list[CheckResult]) -> dict[int, str]:
    """GPU index -> its first UNHEALTHY finding ('Remapped Rows > Pending: Yes'), for the GPU choice to skip."""
    out: dict[int, str] = {}
    for r in unhealthy(results):
        parts = r.id.split(".")
        if len(parts) >= 3 and parts[0] == "gpu" and parts[1].isdigit() and parts[2] == "health":
            out.setdefault(int(parts[1]), r.value)
    return out


def spare(results: list[CheckResult], skipped: set[int], why: str) -> list[CheckResult]:
    """The findings of GPUs the environment will not use, no longer failing the check: WARN, saying so."""
    out = []
    for r in results:
        parts = r.id.split(".")
        index = int(parts[1]) if len(parts) >= 3 and parts[1].isdigit() and parts[2] == "health" else None
        if index in skipped and r.status == FAIL:
            r = CheckResult(r.id, r.title, WARN, f"{r.value} ({why})", r.remedy, {**r.details, "skipped": True})
        out.append(r)
    return out
