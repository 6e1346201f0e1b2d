"""Shared fixtures. Every test runs with DEVENV_HOME and the SSH files pointed at a temporary folder,
so no test reads the user's own profiles, ~/.ssh/config or known_hosts."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(autouse=True)
def isolated_home(tmp_path_factory, monkeypatch) -> Path:
    home = tmp_path_factory.mktemp("devenv-home")
    monkeypatch.setenv("DEVENV_HOME", str(home))
    monkeypatch.setenv("DEVENV_SSH_CONFIG", str(home / "ssh_config"))
    monkeypatch.setenv("DEVENV_KNOWN_HOSTS", str(home / "known_hosts"))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    # settings a user (or a sourced .testhost/env) may have exported; tests that want one set it themselves
    for name in ("DEVENV_ENV", "DEVENV_WHEELHOUSE", "DEVENV_BUILD_CA_BUNDLE", "DEVENV_TUNNEL", "DEVENV_OWNER",
                 "DEVENV_SSH_KEY", "DEVENV_BUILD_CONTEXT"):
        monkeypatch.delenv(name, raising=False)
    return home


from testhost import testhost, testhost_env, use_testhost  # noqa: E402,F401  (the real test host's fixtures)
