"""A path value whose ~user names no user is bad input (exit 2) naming the variable, not a crash: pathlib raises
RuntimeError there (the CLI fuzz test found `DEVENV_SSH_KEY=~-oProxyCommand=...` ending in a traceback)."""

from __future__ import annotations

import pytest

from devenv.config import paths
from devenv.errors import BadInput
from devenv.remote import envkey


def test_an_unknown_users_home_is_bad_input(monkeypatch):
    monkeypatch.setenv("DEVENV_SSH_KEY", "~-oProxyCommand=touch /tmp/x")
    with pytest.raises(BadInput) as caught:
        envkey.chosen_key()
    assert caught.value.exit_code == 2 and "DEVENV_SSH_KEY" in caught.value.message


def test_own_home_and_full_paths_are_as_before(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert paths.expand_home("~/k", "X") == tmp_path / "k"
    assert paths.expand_home("/a/b", "X") == paths.Path("/a/b")
    with pytest.raises(BadInput, match="DEVENV_KNOWN_HOSTS"):
        paths.expand_home("~no-such-user-devenv/kh", "DEVENV_KNOWN_HOSTS")
