"""`devenv check` over real SSH (a throwaway OpenSSH server on loopback) against a host whose nvidia-smi is a
replay of outputs recorded on an H200 (tests/fixtures/nvidia-smi), or a broken one. The replay is a script put
first on the session's PATH through sshd's SetEnv: devenv runs it exactly as it would run the real nvidia-smi."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner
from sshd_fixture import SSHD, make_key

from devenv.cli import main
from devenv.remote import pool

FIX = Path(__file__).parent.parent / "fixtures" / "nvidia-smi"


def replay_script(mode: str) -> str:
    """A stand-in nvidia-smi replaying recorded H200 output (mode h200), [N/A] fields (na), or a failure."""
    row = (FIX / "query-gpu_idle.csv").read_text().strip().split(", ")
    inventory = ", ".join([row[0], row[1], row[2], row[3], row[5], row[18], row[4]])
    if mode == "na":
        inventory = ", ".join([row[0], row[1], "[N/A]", row[3], "[N/A]", "[N/A]", row[4]])
    header = (FIX / "nvidia-smi_idle.txt").read_text()
    if mode == "broken":
        return textwrap.dedent("""\
            #!/bin/sh
            # replay of a failing nvidia-smi (driver/library mismatch after an upgrade)
            echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running."
            exit 9
            """)  # noqa: E501 (the real message, verbatim)
    return f"""#!/bin/sh
# replay of nvidia-smi recorded on an H200 (driver 580.159.04), mode {mode}
case "$*" in
  *--query-gpu=*) cat <<'CSV'
{inventory}
CSV
  ;;
  *) cat <<'TXT'
{header}TXT
  ;;
esac
"""


@pytest.fixture
def gpu_host(tmp_path, isolated_home, request):
    mode, forwarding = request.param
    bindir = tmp_path / "replay-bin"
    bindir.mkdir()
    script = bindir / "nvidia-smi"
    script.write_text(replay_script(mode))
    script.chmod(0o755)
    key = make_key(tmp_path / "id_ed25519")
    extra = f"SetEnv PATH={bindir}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"
    server = SSHD(tmp_path / "sshd", authorized_keys=[key.public], extra_config=extra)
    if not forwarding:
        server.config_path.write_text(server.config_path.read_text().replace(
            "AllowTcpForwarding yes", "AllowTcpForwarding no"))
    with server:
        (isolated_home / "known_hosts").write_text(server.known_hosts_line())
        hosts = isolated_home / "profiles" / "hosts"
        hosts.mkdir(parents=True)
        (hosts / "gpubox.yaml").write_text(
            f"ssh:\n  hostname: 127.0.0.1\n  port: {server.port}\n  user: root\n  identity_file: {key.path}\n"
            "runtime: docker\ndefault_env: cuda\n")
        yield server
        pool.close_all()


def run_check(*args):
    result = CliRunner().invoke(main, ["check", "gpubox", "--json", *args])
    assert "Traceback" not in result.output
    assert result.stdout.startswith("{"), (result.output, result.exception)
    return result, json.loads(result.stdout)


def by_id(report):
    return {c["id"]: c for c in report["checks"]}


@pytest.mark.parametrize("gpu_host", [("h200", True)], indirect=True)
def test_h200_replay_cuda_128_env_is_judged_runnable(gpu_host):
    result, report = run_check("--env", "cuda")
    checks = by_id(report)
    assert checks["ssh"]["status"] == "pass"
    assert checks["nvidia.driver"]["status"] == "pass" and "580.159.04" in checks["nvidia.driver"]["value"]
    assert "13.0" in checks["nvidia.driver"]["value"]
    assert "NVIDIA H200" in checks["gpu.0"]["value"] and "9.0" in checks["gpu.0"]["value"]
    compat = [c for c in report["checks"] if c["id"].startswith("compat.")]
    assert compat and all(c["status"] == "pass" for c in compat), compat
    # this machine has a GPU-less dockerd: the toolkit check must say so, and the exit code follows it
    assert checks["nvidia.toolkit"]["status"] == "fail"
    assert result.exit_code == 1


@pytest.mark.parametrize("gpu_host", [("na", True)], indirect=True)
def test_na_fields_do_not_crash_and_compat_says_unknown(gpu_host):
    result, report = run_check("--env", "cuda")
    checks = by_id(report)
    assert checks["gpu.0"]["status"] == "warn"
    compat = [c for c in report["checks"] if c["id"].startswith("compat.")]
    assert any(c["details"].get("compat_status") == "unknown" for c in compat), compat


@pytest.mark.parametrize("gpu_host", [("broken", True)], indirect=True)
def test_failing_nvidia_smi_is_a_clear_failure(gpu_host):
    result, report = run_check("--env", "cuda")
    driver = by_id(report)["nvidia.driver"]
    assert driver["status"] == "fail" and "cannot talk to the NVIDIA driver" in driver["value"]
    assert "modprobe" in driver["remedy"]
    assert result.exit_code == 1


@pytest.mark.parametrize("gpu_host", [("h200", False)], indirect=True)
def test_forwarding_disabled_fails_with_the_sshd_config_remedy(gpu_host):
    result, report = run_check("--env", "cuda")
    forwarding = by_id(report)["ssh.forwarding"]
    assert forwarding["status"] == "fail" and "AllowTcpForwarding" in forwarding["remedy"]
