"""The monitor's kill key as a user who is not root: the TUI's own kill service (services/monitor_wiring), over the
test host's real sshd, logged in as the unprivileged `devenv-nodocker` (alias testbox-nodocker). Real processes of
three owners run on the host: that user's own, root's and nobody's. Only the own one may be stopped."""

from __future__ import annotations

import subprocess

import pytest
from monitor_helpers import wait_until

from devenv.config.hostref import load_host
from devenv.errors import DevenvError
from devenv.remote.pool import close_all
from devenv.services.monitor_wiring import services_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

ALIAS, USER = "testbox-nodocker", "devenv-nodocker"


def sleeper(user: str | None) -> subprocess.Popen:
    if user is None:
        return subprocess.Popen(["sleep", "300"])
    return subprocess.Popen(["setpriv", f"--reuid={user}", f"--regid={user if user != 'nobody' else 'nogroup'}",
                             "--clear-groups", "sleep", "300"])


@pytest.fixture
def processes():
    procs = {"own": sleeper(USER), "root": sleeper(None), "nobody": sleeper("nobody")}
    yield procs
    for proc in procs.values():
        proc.kill()
        proc.wait()


def test_another_users_process_is_refused_and_the_own_one_is_stopped(use_testhost, processes):
    services = services_for({ALIAS: load_host(ALIAS)})
    try:
        for owner in ("root", "nobody"):
            target = processes[owner]
            for signal in ("TERM", "KILL"):
                with pytest.raises(DevenvError) as refused:
                    services.kill(ALIAS, target.pid, signal, None)
                assert f"pid {target.pid} belongs to {owner}, not {USER}" in refused.value.message
                assert "only your own processes" in refused.value.hint
            assert target.poll() is None, f"{owner}'s process still runs"

        own = processes["own"]
        said = services.kill(ALIAS, own.pid, "TERM", "sleep 300")
        assert said == f"sent SIGTERM to {own.pid} ({USER})"
        wait_until(lambda: own.poll() is not None, 10, what="the own process to end")
        assert own.returncode == -15
        assert processes["root"].poll() is None and processes["nobody"].poll() is None
    finally:
        close_all()
