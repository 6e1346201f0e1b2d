"""What `devenv check` asks a host, and how each answer is judged (L0: pure, fed recorded outputs in tests).

Each probe is one shell command (POSIX sh, so it works whatever the login shell); each judge turns probe
outputs into CheckResults with the value seen and a remedy. The preflight service runs the probes in parallel.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any, Protocol

from devenv.checks.report import FAIL, INFO, PASS, SKIP, WARN, CheckResult, Status
from devenv.gpu import nvsmi


class Output(Protocol):
    stdout: str
    stderr: str
    exit_code: int


DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

PROBES: dict[str, str] = {
    "os": "uname -srm; cat /etc/os-release 2>/dev/null",
    "docker_version": "command -v docker >/dev/null 2>&1 || exit 127; docker version --format '{{json .}}'",
    "docker_info": "command -v docker >/dev/null 2>&1 || exit 127; docker info --format '{{json .}}'",
    # The GPU hook must be on *dockerd's* PATH, not ours: read it from the daemon's environment when we may.
    "toolkit": (
        "pid=$(pgrep -o dockerd 2>/dev/null); dp=''; "
        "if [ -n \"$pid\" ] && [ -r /proc/$pid/environ ]; then "
        "dp=$(tr '\\0' '\\n' < /proc/$pid/environ | sed -n 's/^PATH=//p'); fi; "
        "echo \"dockerd_path ${dp:-unknown}\"; "
        f"IFS=:; for d in ${{dp:-{DEFAULT_PATH}}}; do "
        "[ -x \"$d/nvidia-container-runtime-hook\" ] && echo \"hook $d/nvidia-container-runtime-hook\"; done; "
        "unset IFS; "
        "for b in nvidia-ctk nvidia-container-cli; do p=$(command -v $b 2>/dev/null) && echo \"bin $b $p\"; done; "
        "for f in /etc/cdi/* /var/run/cdi/*; do "
        "[ -f \"$f\" ] && grep -qs 'nvidia.com/gpu' \"$f\" && echo \"cdi $f\"; done; true"
    ),
}


def gpu_probes() -> dict[str, str]:
    """The nvidia-smi probes, built when asked (their time limit is nvsmi.ANSWER_S as it is then)."""
    return {
        "gpus": nvsmi.preamble() + "command -v nvidia-smi >/dev/null 2>&1 || exit 127; "
                f"{nvsmi.INVENTORY_COMMAND.replace('nvidia-smi', nvsmi.CALL, 1)} 2>&1",
        "nvsmi_header": nvsmi.preamble() + "command -v nvidia-smi >/dev/null 2>&1 || exit 127; out=$(nvidia_smi 2>&1); "
                        "rc=$?; printf '%s\\n' \"$out\" | head -n 4; exit $rc",
        # MIG mode apart from the inventory: a driver that refuses the field must not cost the GPU list
        "mig": nvsmi.preamble() + f"{nvsmi.CALL} --query-gpu=index,mig.mode.current --format=csv,noheader,nounits",
    }


PROBES.update(gpu_probes())  # as they are at import (cluster_check reads them here)


def disk_probe(directory: str) -> str:
    return f"df -PB1 {directory} 2>&1 | tail -n 1"


def image_probe(image: str) -> str:
    return f"docker image inspect {shlex.quote(image)} --format '{{{{json .}}}}' 2>&1"


def python_probe(python: str) -> str:
    code = ("import json,sys,platform; d={'python': platform.python_version()}\n"
            "try:\n import torch; d['torch']=torch.__version__; d['cuda']=torch.version.cuda; "
            "d['arch_list']=torch.cuda.get_arch_list() if torch.cuda.is_available() else []\n"
            "except Exception as e: d['torch_error']=type(e).__name__+': '+str(e)\n"
            "print(json.dumps(d))")
    return f"{shlex.quote(python)} -c {shlex.quote(code)}"


# --- judges ------------------------------------------------------------------------------------------

SLOW_NETWORK_MS = 200
SLOW_SHELL_MS = 500


def judge_ssh(local: bool, latency_ms: float | None, target: str, command_ms: float | None = None) -> CheckResult:
    """latency_ms: the SSH-level round trip (the network and sshd); command_ms: running `true` through the
    login shell. What the second adds beyond the first is shell start-up, judged with its own hint."""
    if local:
        return CheckResult("ssh", "SSH reachable", SKIP, "this machine (no SSH)")
    shell_ms = max(0.0, command_ms - (latency_ms or 0.0)) if command_ms is not None else None
    parts, remedies = [target], []
    if latency_ms is not None:
        parts.append(f"round trip {latency_ms:.0f} ms")
        if latency_ms >= SLOW_NETWORK_MS:
            remedies.append("high network latency: tunnels and the TUI will feel slow; a closer jump host may help")
    if shell_ms is not None:
        parts.append(f"shell start-up {shell_ms:.0f} ms")
        if shell_ms >= SLOW_SHELL_MS:
            remedies.append("slow shell start-up on the host (every devenv command pays it): look for slow lines "
                            "in ~/.bashrc / ~/.profile there (e.g. conda or pyenv init); time them with "
                            "`time bash -lic true`")
    details = {"latency_ms": round(latency_ms, 1) if latency_ms is not None else None,
               "shell_startup_ms": round(shell_ms, 1) if shell_ms is not None else None,
               "command_ms": round(command_ms, 1) if command_ms is not None else None}
    return CheckResult("ssh", "SSH reachable", WARN if remedies else PASS, ", ".join(parts),
                       "; ".join(remedies) or None, details)


def judge_os(out: Output) -> CheckResult:
    if out.exit_code != 0 or not out.stdout.strip():
        return CheckResult("os", "OS and architecture", WARN, "could not read uname", "is this a Linux host?")
    lines = out.stdout.splitlines()
    kernel = lines[0].split()
    release = dict(re.findall(r'^(\w+)="?([^"\n]*)"?$', out.stdout, re.M))
    system, arch = kernel[0], kernel[-1]
    pretty = release.get("PRETTY_NAME", system)
    value = f"{pretty}, {arch}, kernel {kernel[1] if len(kernel) > 2 else '?'}"
    details = {"system": system, "arch": arch, "os": pretty}
    if system != "Linux":
        return CheckResult("os", "OS and architecture", FAIL, value,
                           "NVIDIA GPU containers need a Linux host", details)
    if arch not in ("x86_64", "aarch64"):
        return CheckResult("os", "OS and architecture", WARN, value,
                           "PyTorch CUDA wheels exist for x86_64 and aarch64 only", details)
    return CheckResult("os", "OS and architecture", PASS, value, None, details)


def parse_docker_json(out: Output) -> dict[str, Any] | None:
    for line in out.stdout.splitlines():
        if line.startswith("{"):
            try:
                found: dict[str, Any] = json.loads(line)  # a line starting with "{" is an object
                return found
            except json.JSONDecodeError:
                break
    # podman prints `--format '{{json .}}'` of an inspect as an indented array
    start = out.stdout.find("[")
    try:
        data = json.loads(out.stdout[start:]) if start >= 0 else None
    except json.JSONDecodeError:
        return None
    if isinstance(data, list) and data and isinstance(data[0], dict):
        return data[0]
    return None


def judge_docker(version: Output, info: Output) -> list[CheckResult]:
    title = "Docker"
    if version.exit_code == 127:
        return [CheckResult("docker.installed", title, FAIL, "docker is not installed",
                            "install Docker (`apt install docker.io` or docs.docker.com/engine/install), "
                            "or set `runtime: host` in the host profile to run without containers")]
    text = (version.stderr + version.stdout).lower()
    data = parse_docker_json(version) or {}
    client = (data.get("Client") or {}).get("Version", "?")
    server = (data.get("Server") or {}) or {}
    if "permission denied" in text:
        return [CheckResult("docker.installed", title, PASS, f"client {client}"),
                CheckResult("docker.access", "Docker daemon access", FAIL,
                            "permission denied on the Docker socket",
                            "add your user to the docker group: `sudo usermod -aG docker $USER`, then log in again "
                            "(or ask the host's admin)")]
    if version.exit_code != 0 or not server:
        why = "daemon not reachable" if "cannot connect" in text or "is the docker daemon running" in text else \
            (version.stderr.strip().splitlines() or ["docker version failed"])[-1]
        return [CheckResult("docker.installed", title, PASS, f"client {client}"),
                CheckResult("docker.daemon", "Docker daemon", FAIL, why,
                            "start it: `sudo systemctl start docker` (or `sudo dockerd &`)")]
    server_version = server.get("Version", "?")
    api = server.get("ApiVersion", "?")
    results = [CheckResult("docker.daemon", "Docker daemon", PASS,
                           f"server {server_version} (API {api}), client {client}",
                           None, {"server_version": server_version, "api_version": api})]
    major = _major(server_version)
    if major is not None and major < 19:
        results[0] = CheckResult("docker.daemon", "Docker daemon", WARN, results[0].value,
                                 "Docker >= 19.03 is needed for --gpus; upgrade Docker", results[0].details)
    return results


def _major(version: str) -> int | None:
    m = re.match(r"(\d+)", version or "")
    return int(m.group(1)) if m else None


def judge_disk(df: Output, directory: str, image_present: bool, image_size_gb: float | None) -> CheckResult:
    title = f"Free disk ({directory})"
    fields = df.stdout.split()
    if df.exit_code != 0 or len(fields) < 4 or not fields[3].isdigit():
        return CheckResult("disk", title, WARN, "could not read free space", f"check `df -h {directory}` on the host")
    free_gb = int(fields[3]) / 1e9
    details = {"free_gb": round(free_gb, 1), "image_size_gb": image_size_gb, "image_present": image_present}
    value = f"{free_gb:.1f} GB free"
    if image_present:
        status = PASS if free_gb >= 5 else WARN
        return CheckResult("disk", title, status, value + ", image already present",
                           None if status == PASS else "under 5 GB left for the workspace and logs", details)
    if image_size_gb is None:
        hint = "set image_size_gb in the environment profile to check it" if free_gb < 20 else None
        return CheckResult("disk", title, WARN if free_gb < 20 else PASS, value + ", image size unknown", hint, details)
    need = image_size_gb * 1.2 + 2  # layers unpack bigger than they download; leave room for the workspace
    value += f", image needs ~{image_size_gb:g} GB"
    if free_gb < image_size_gb:
        return CheckResult("disk", title, FAIL, value,
                           f"free at least {need:.0f} GB under {directory} (`docker system prune`), "
                           "or move Docker's data-root to a larger disk", details)
    if free_gb < need:
        return CheckResult("disk", title, WARN, value, f"tight: keep at least {need:.0f} GB free", details)
    return CheckResult("disk", title, PASS, value, None, details)


def judge_gpus(
    gpus: Output, header: Output, wants_gpu: bool,
) -> tuple[list[CheckResult], list[nvsmi.GpuInfo], str | None]:
    """The driver and GPU checks, plus the inventory and driver CUDA version for the compat checks."""
    missing = FAIL if wants_gpu else WARN
    if gpus.exit_code != 0:
        what, remedy = nvsmi.explain_failure(gpus.stdout + gpus.stderr, gpus.exit_code)
        remedy = f"{remedy}, or use a CPU environment (--env cpu)" if wants_gpu else \
            f"fine for this CPU-only environment; for GPU work: {remedy}"
        return [CheckResult("nvidia.driver", "NVIDIA driver", missing, what, remedy)], [], None
    inventory = nvsmi.parse_inventory(gpus.stdout)
    driver, driver_cuda = nvsmi.parse_header(header.stdout)
    driver = driver or next((g.driver_version for g in inventory if g.driver_version), None)
    if not inventory:
        return [CheckResult("nvidia.driver", "NVIDIA driver", missing, f"driver {driver or '?'}, but no GPU listed",
                            "check `nvidia-smi -L` on the host")], [], driver_cuda
    results = [CheckResult("nvidia.driver", "NVIDIA driver", PASS if driver else WARN,
                           f"{driver or 'version unreadable'}"
                           + (f" (supports CUDA up to {driver_cuda})" if driver_cuda else ""),
                           None if driver else "nvidia-smi printed no driver version",
                           {"driver": driver, "driver_cuda": driver_cuda})]
    for gpu in inventory:
        mem = f"{gpu.memory_total_mib / 1024:.0f} GiB" if gpu.memory_total_mib else "memory N/A"
        cc = gpu.compute_capability or "N/A"
        results.append(CheckResult(f"gpu.{gpu.index}", f"GPU {gpu.index}", PASS if gpu.name else WARN,
                                   f"{gpu.name or 'unknown model'}, {mem}, compute capability {cc}",
                                   None if gpu.name else "nvidia-smi could not read this GPU's model", gpu.to_dict()))
    models = sorted({g.name for g in inventory if g.name})
    if len(models) > 1:
        results.append(CheckResult("gpu.mixed", "GPU models", WARN, ", ".join(models),
                                   "mixed models on one host: pin jobs to one model (CUDA_VISIBLE_DEVICES); "
                                   "DDP runs at the slowest GPU's pace"))
    return results, inventory, driver_cuda


def judge_mig(out: Output) -> list[CheckResult]:
    """A warning per GPU in MIG mode: CUDA sees its MIG instances, not the GPU (NVML reports no utilisation)."""
    if out.exit_code != 0:
        return []
    results = []
    for row in nvsmi.parse_csv(out.stdout, ("index", "mig.mode.current")):
        if (row["mig.mode.current"] or "").lower() == "enabled":
            results.append(CheckResult(
                f"gpu.{row['index']}.mig", f"GPU {row['index']} MIG", WARN,
                "MIG mode is on: CUDA and containers see its MIG instances (`nvidia-smi -L`), not the whole GPU",
                "fine to run in one instance (its share of memory and SMs; no utilisation is reported); for the "
                "whole GPU: `sudo nvidia-smi -i INDEX -mig 0` and reset it; sanity speeds are judged per instance",
                {"mig_mode": "Enabled"}))
    return results


def judge_toolkit(out: Output, info: dict[str, Any] | None, has_gpu: bool, wants_gpu: bool) -> CheckResult:
    title = "NVIDIA container toolkit"
    if not has_gpu or not wants_gpu:
        return CheckResult("nvidia.toolkit", title, SKIP, "no GPU to hand to containers" if not has_gpu
                           else "this environment asks for no GPU")
    lines = out.stdout.splitlines()
    hooks = [line.split(" ", 1)[1] for line in lines if line.startswith("hook ")]
    cdi = [line.split(" ", 1)[1] for line in lines if line.startswith("cdi ")]
    runtimes = sorted((info or {}).get("Runtimes", {}) or {})
    details = {"hooks": hooks, "cdi_specs": cdi, "runtimes": runtimes}
    if hooks:
        return CheckResult("nvidia.toolkit", title, PASS, f"runtime hook on dockerd's PATH ({hooks[0]})", None, details)
    if "nvidia" in runtimes:
        return CheckResult("nvidia.toolkit", title, PASS, "the nvidia runtime is registered with Docker", None, details)
    if cdi:
        return CheckResult("nvidia.toolkit", title, PASS, f"CDI spec {cdi[0]}", None, details)
    return CheckResult("nvidia.toolkit", title, FAIL,
                       "no nvidia-container-runtime-hook on dockerd's PATH, no nvidia runtime, no CDI spec",
                       "install nvidia-container-toolkit, then `sudo nvidia-ctk runtime configure --runtime=docker "
                       "&& sudo systemctl restart docker` (without it: could not select device driver \"\" "
                       "with capabilities: [[gpu]])", details)


def image_facts(out: Output) -> dict[str, Any] | None:
    """Size, labels and CUDA env of a local image, or None when it is not on the host."""
    if out.exit_code != 0:
        return None
    data = parse_docker_json(out)
    if not data:
        return None
    config = data.get("Config") or {}
    env = dict(e.split("=", 1) for e in config.get("Env") or [] if "=" in e)
    labels = config.get("Labels") or {}
    return {
        "size_gb": round((data.get("Size") or 0) / 1e9, 2),
        "cuda": labels.get("org.devenv.cuda") or env.get("CUDA_VERSION"),
        "torch": labels.get("org.devenv.torch"),
        "require_cuda": env.get("NVIDIA_REQUIRE_CUDA"),
    }


def judge_forwarding(allowed: bool | None, detail: str) -> CheckResult:
    title = "sshd TCP forwarding"
    if allowed is None:
        return CheckResult("ssh.forwarding", title, SKIP, detail)
    if allowed:
        return CheckResult("ssh.forwarding", title, PASS, detail)
    return CheckResult("ssh.forwarding", title, FAIL, detail,
                       "set `AllowTcpForwarding yes` (or `local`) in /etc/ssh/sshd_config and reload sshd; "
                       "devenv's tunnels to Jupyter and the container's sshd need it")


def judge_python(out: Output, python: str) -> CheckResult:
    title = f"Host python ({python})"
    if out.exit_code != 0:
        return CheckResult("python", title, FAIL, (out.stderr or out.stdout).strip().splitlines()[-1:] and
                           (out.stderr or out.stdout).strip().splitlines()[-1] or "not runnable",
                           "set `python:` in the host profile to a python that has torch (a venv's bin/python)")
    try:
        data = json.loads(out.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        return CheckResult("python", title, WARN, "unreadable answer", None)
    if "torch" not in data:
        return CheckResult("python", title, WARN, f"Python {data['python']}, no torch ({data.get('torch_error', '')})",
                           "install PyTorch into that python, or point `python:` at one that has it", data)
    cuda = f" (CUDA {data['cuda']})" if data.get("cuda") else " (CPU build)"
    return CheckResult("python", title, PASS, f"Python {data['python']}, torch {data['torch']}{cuda}", None, data)


def status_of(findings_status: str) -> Status:
    return {"pass": PASS, "warn": WARN, "fail": FAIL, "unknown": WARN, "info": INFO}.get(findings_status, WARN)


# --- one round trip for every probe --------------------------------------------------------------------

BATCH_MARK = "@@devenv-probe"


def batch_script(probes: dict[str, str], limit_s: int = 25) -> str:
    """One shell script running every probe in parallel on the host, each answer base64-encoded on one line.

    One SSH session instead of one per probe: a probe costs no extra round trip on a distant host, and servers
    that cap sessions per connection (dropbear, sshd's MaxSessions) see one session. A probe still running after
    limit_s (a hung Docker daemon, say) is reported with exit code 124 and whatever it printed so far."""
    names = " ".join(probes)
    parts = ['d=$(mktemp -d) || exit 1']
    for name, command in probes.items():
        parts.append(f'( ( {command} ) >"$d/{name}.out" 2>"$d/{name}.err" </dev/null; '
                     f'echo $? >"$d/{name}.rc.t"; mv "$d/{name}.rc.t" "$d/{name}.rc" ) >/dev/null 2>&1 &')
    # i counts tenths of a second: the first half second is looked at every 0.02 s (most probes are done by
    # then, and a 0.1 s step was most of a quick batch's wait), the rest every 0.1 s
    parts.append(f'f=0; i=0; while [ $i -lt {limit_s * 10} ]; do left=0; for n in {names}; do '
                 '[ -f "$d/$n.rc" ] || left=1; done; [ $left = 0 ] && break; '
                 'if [ $f -lt 25 ]; then f=$((f+1)); sleep 0.02; [ $((f % 5)) = 0 ] && i=$((i+1)); '
                 'else sleep 0.1; i=$((i+1)); fi; done')
    parts.append(f'for n in {names}; do rc=$(cat "$d/$n.rc" 2>/dev/null || echo 124); '
                 f'printf "{BATCH_MARK} %s %s %s %s\\n" "$n" "$rc" '
                 '"$(base64 -w0 <"$d/$n.out")" "$(base64 -w0 <"$d/$n.err")"; done')
    parts.append('rm -rf "$d"')
    return "\n".join(parts)


def parse_batch(stdout: str, probes: dict[str, str]) -> dict[str, BatchOutput]:
    """The answers of batch_script; a probe missing from the output counts as failed (exit 255)."""
    import base64

    found: dict[str, BatchOutput] = {}
    for line in stdout.splitlines():
        fields = line.split(" ")
        if len(fields) >= 3 and fields[0] == BATCH_MARK and fields[1] in probes:
            out = base64.b64decode(fields[3]).decode(errors="replace") if len(fields) > 3 else ""
            err = base64.b64decode(fields[4]).decode(errors="replace") if len(fields) > 4 else ""
            code = int(fields[2]) if fields[2].lstrip("-").isdigit() else 255
            found[fields[1]] = BatchOutput(probes[fields[1]], out, err, code)
    for name, command in probes.items():
        found.setdefault(name, BatchOutput(command, "", "the probe gave no answer", 255))
    return found


class BatchOutput:
    """A probe's answer, shaped like a Result (command, stdout, stderr, exit_code, ok)."""

    def __init__(self, command: str, stdout: str, stderr: str, exit_code: int):
        self.command, self.stdout, self.stderr, self.exit_code = command, stdout, stderr, exit_code

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


def home_disk_probe() -> str:
    """Free space under $HOME, where environments of the host's python keep their files (the engines' data
    roots are checks.engine.disk_probe). Prints the directory on the first line and df's line on the second."""
    return 'echo "$HOME"; df -PB1 "$HOME" 2>&1 | tail -n 1'
