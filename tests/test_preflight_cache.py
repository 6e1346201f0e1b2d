"""The preflight of `up` is reused only while one probe batch finds the host's facts unchanged (this machine's
real shell answers the probes; the full check is counted, not run)."""

from __future__ import annotations

import json
import os
import stat

from devenv.checks.report import FAIL, PASS, WARN, CheckReport, CheckResult
from devenv.config.profiles import EnvProfile, HostProfile
from devenv.remote.local import LocalConnection
from devenv.services import preflight_cache

HOST = HostProfile(name="here", source="t", local=True, runtime="host")
ENV = EnvProfile(name="cpu", source="t", image="unused", gpus="none")


class CountingConnection(LocalConnection):
    def __init__(self) -> None:
        super().__init__()
        self.runs = 0

    def run(self, command, **kwargs):  # type: ignore[no-untyped-def]
        self.runs += 1
        return super().run(command, **kwargs)


class FullCheck:
    def __init__(self, status: str = PASS) -> None:
        self.calls = 0
        self.status = status

    def __call__(self) -> CheckReport:
        self.calls += 1
        return CheckReport(HOST.name, ENV.name, [
            CheckResult("os", "OS", self.status, "Linux"),
            CheckResult("disk", "Free disk (/root)", PASS, "big", None, {"image_present": True}),
        ])


def preflight(conn: CountingConnection, full: FullCheck, env: EnvProfile = ENV) -> CheckReport:
    return preflight_cache.cached_preflight(conn, HOST, env, False, False, full)


def test_a_clean_check_is_reused_with_one_probe() -> None:
    full, conn = FullCheck(), CountingConnection()
    first = preflight(conn, full)
    assert full.calls == 1 and first.ok
    path = preflight_cache.cache_path(HOST.name, ENV.name)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    conn.runs = 0
    again = preflight(conn, full)
    assert full.calls == 1 and conn.runs == 1  # one probe batch, no full check
    assert [c.id for c in again.checks] == ["os", "disk"] and again.ok


def test_a_changed_fingerprint_runs_the_full_check() -> None:
    full, conn = FullCheck(), CountingConnection()
    preflight(conn, full)
    path = preflight_cache.cache_path(HOST.name, ENV.name)
    data = json.loads(path.read_text())
    data["facts"]["boot"] = "another boot\n"
    path.write_text(json.dumps(data))
    preflight(conn, full)
    assert full.calls == 2
    preflight(conn, full)  # cached anew with the facts as they are
    assert full.calls == 2


def test_another_environment_profile_runs_the_full_check() -> None:
    full, conn = FullCheck(), CountingConnection()
    preflight(conn, full)
    preflight(conn, full, EnvProfile(name="cpu", source="t", image="unused", gpus="none", shm_size="2g"))
    assert full.calls == 2


def test_a_failed_check_is_never_reused() -> None:
    full, conn = FullCheck(FAIL), CountingConnection()
    preflight(conn, full)
    assert not preflight_cache.cache_path(HOST.name, ENV.name).exists()
    preflight(conn, full)
    assert full.calls == 2


def test_a_warned_check_is_reused_with_its_warning() -> None:
    full, conn = FullCheck(WARN), CountingConnection()
    preflight(conn, full)
    again = preflight(conn, full)
    assert full.calls == 1 and [c.status for c in again.checks] == [WARN, PASS]


def test_a_failed_cached_check_is_not_trusted() -> None:
    full, conn = FullCheck(), CountingConnection()
    preflight(conn, full)
    path = preflight_cache.cache_path(HOST.name, ENV.name)
    data = json.loads(path.read_text())
    data["report"]["checks"][0]["status"] = FAIL
    path.write_text(json.dumps(data))
    assert preflight(conn, full).ok
    assert full.calls == 2


def test_a_corrupt_cache_runs_the_full_check() -> None:
    full, conn = FullCheck(), CountingConnection()
    preflight(conn, full)
    path = preflight_cache.cache_path(HOST.name, ENV.name)
    for text in ("{not json", "[]", json.dumps({"key": "x"}), ""):
        path.write_text(text)
        calls = full.calls
        assert preflight(conn, full).ok
        assert full.calls == calls + 1


def test_a_change_during_the_full_check_is_not_kept_as_checked(tmp_path) -> None:
    """The facts are asked before the full check: a host that changes while it runs (here the host's python,
    replaced) is checked in full at the next `up`. They were asked after it, so the new python was kept with
    the old python's answers and served from the cache (this test failed so)."""
    python = tmp_path / "python3"
    python.write_text("#!/bin/sh\nexit 0\n")
    python.chmod(0o755)
    host = HostProfile(name="here", source="t", local=True, runtime="host", python=str(python))
    conn = CountingConnection()

    class ReplacedDuringTheCheck(FullCheck):
        def __call__(self) -> CheckReport:
            if self.calls == 0:
                python.write_text("#!/bin/sh\n# another python, put in while the check ran\nexit 0\n")
            return super().__call__()

    full = ReplacedDuringTheCheck()
    preflight_cache.cached_preflight(conn, host, ENV, False, False, full)
    preflight_cache.cached_preflight(conn, host, ENV, False, False, full)
    assert full.calls == 2      # the python it checked is not the one there now
    preflight_cache.cached_preflight(conn, host, ENV, False, False, full)
    assert full.calls == 2      # and that one's check stands while nothing changes


def test_a_gpu_toolkit_change_is_not_served_from_the_cache(tmp_path, monkeypatch) -> None:
    """A CDI spec written (or removed) for the GPUs changes the GPU-access answer without a reboot or a dockerd
    restart: the next `up` checks in full (served from the cache before: this test failed so). The host's
    engines are stubs here that know nothing (the shared dockerd is not asked)."""
    stubs = tmp_path / "bin"
    stubs.mkdir()
    for name in ("docker", "podman"):
        (stubs / name).write_text("#!/bin/sh\nexit 1\n")
        (stubs / name).chmod(0o755)
    cdi = tmp_path / "cdi"
    cdi.mkdir()
    monkeypatch.setenv("PATH", f"{stubs}:{os.environ['PATH']}")
    monkeypatch.setenv("DEVENV_CDI_SPEC_DIRS", str(cdi))
    host = HostProfile(name="here", source="t", local=True, runtime="docker")
    full, conn = FullCheck(), CountingConnection()
    preflight_cache.cached_preflight(conn, host, ENV, False, True, full)
    preflight_cache.cached_preflight(conn, host, ENV, False, True, full)
    assert full.calls == 1      # nothing changed: reused
    (cdi / "nvidia.yaml").write_text("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: []\n")
    preflight_cache.cached_preflight(conn, host, ENV, False, True, full)
    assert full.calls == 2
