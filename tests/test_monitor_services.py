"""The monitor keys' wiring to real services (devenv/services/monitor_wiring.py): the last saved sanity verdict,
and `s` running the real sanity program on the bundled `local` host (torch here is a CPU build, so the run
runs the CPU smoke and its verdict says that no GPU was proven)."""

from __future__ import annotations

import pytest

from devenv.config import profiles
from devenv.remote.pool import close_all
from devenv.sanity.verdict import Check, Verdict
from devenv.services import sanity_history
from devenv.services.monitor_wiring import _sanity_progress, services_for

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def fresh_pool():
    yield
    close_all()


def test_last_verdict_reads_the_saved_sanity_history():
    services = services_for({"local": profiles.load_host("local")})
    assert services.last_verdict("local") is None
    verdict = Verdict(status="warn", summary="slow matmul", gpu_proven=True, sku="h200", gpu_name="NVIDIA H200")
    sanity_history.save_report("local", {"suite": "quick"}, verdict, suite="quick")
    assert services.last_verdict("local").startswith("WARN (20")
    assert all((services.env_state, services.up, services.down, services.open_jupyter, services.follow_logs,
                services.run_sanity, services.close)), "every key is wired"


def test_sanity_progress_lines():
    seen = []
    progress = lambda text, fraction: seen.append((text, fraction))  # noqa: E731
    _sanity_progress({"event": "start"}, progress)
    _sanity_progress({"event": "progress", "step": "matmul", "i": 1, "n": 4, "msg": "bf16 8192"}, progress)
    checks = [Check(name="matmul bf16: rate", status="fail"), Check(name="matmul bf16: accuracy", status="pass"),
              Check(name="matmul bf16: repeatable", status="pass")]
    _sanity_progress({"event": "result", "check": "matmul_bf16", "checks": checks}, progress)
    _sanity_progress({"event": "report"}, progress)
    assert seen == [("started", 0.0), ("matmul: bf16 8192", 0.25),
                    ("  matmul_bf16: 1 fail, 2 pass (matmul bf16: rate)", None)]


# the real CPU sanity program runs here: ~60 s on a quiet 2-core machine with 2 threads, past 120 s when it is
# loaded; one thread (OMP_NUM_THREADS=1, as tests/test_sanity_script_cpu.py: the same steps, a fraction of the CPU)
@pytest.mark.timeout(300)
def test_s_runs_the_real_sanity_program_with_live_progress(local_torch, monkeypatch):
    """torch here is a CPU build: the real program runs its CPU smoke and the verdict says no GPU was proven."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the program's process inherits it (LocalConnection)
    services = services_for({"local": profiles.load_host("local")})
    seen = []
    verdict = services.run_sanity("local", lambda text, fraction: seen.append((text, fraction)))
    assert verdict.startswith("NO-GPU: ") and "nothing about a GPU was proven" in verdict
    assert seen[0] == ("started", 0.0) and seen[-2][1] == 1.0, "progress reaches the last step"
    assert any(text.startswith("  matmul_fp32: ") for text, _ in seen)
    assert services.last_verdict("local").startswith("NO-GPU (20"), "the run is saved like `devenv sanity` does"


def test_tunnel_lines_reach_the_app_with_a_long_outage_s_attempts_thinned():
    from devenv.services.monitor_wiring import TunnelLines

    now = [0.0]
    lines = TunnelLines(every=10.0, clock=lambda: now[0])
    got: list[tuple[str, str, bool]] = []
    lines.say("gpu1", "before anyone listens")
    lines.watch(lambda host, line, trouble: got.append((host, line, trouble)))
    lines.say("gpu1", "the tunnel to gpu1 dropped; reconnecting (local ports 8888 kept)")
    for attempt in range(1, 12):   # one a second: the first, then one each 10 s
        now[0] = float(attempt)
        lines.say("gpu1", f"reconnecting to gpu1 (attempt {attempt}, {attempt} s): refused; next try in 1 s")
    lines.say("gpu1", "reconnected to gpu1 after 12.0 s (attempt 12); the same local ports answer again")
    assert [(line.split(" (")[0] if "attempt" in line else line.split(";")[0], trouble)
            for _, line, trouble in got] == [
        ("the tunnel to gpu1 dropped", True), ("reconnecting to gpu1", True), ("reconnecting to gpu1", True),
        ("reconnected to gpu1 after 12.0 s", False)]
    assert "(attempt 11," in got[2][1]
