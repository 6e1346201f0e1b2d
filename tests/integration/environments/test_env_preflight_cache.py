"""`up` after `down` on the real test host reuses the last clean check while its one fingerprint probe finds the
host's facts unchanged, and runs the full check again when they changed (here: the cached fingerprint edited)."""

from __future__ import annotations

import json

import pytest

from devenv.services import preflight_cache

pytestmark = pytest.mark.integration

STANDS = "its answers stand"
FULL = "the full check"


def test_up_after_down_reuses_the_clean_check_until_a_fact_changes(test_env):
    env = test_env.name
    first = test_env.run("-v", "up", "testbox", "--env", env, "--detach")
    assert FULL in first.stderr and STANDS not in first.stderr
    cache = test_env.home / "state" / "preflight" / "testbox" / f"{env}.json"
    assert cache == preflight_cache.cache_path("testbox", env)
    assert cache.stat().st_mode & 0o777 == 0o600
    test_env.run("down", "testbox", "--env", env)

    again = test_env.run("-v", "up", "testbox", "--env", env, "--detach")
    assert STANDS in again.stderr and FULL not in again.stderr
    assert test_env.state() == "running"
    test_env.run("down", "testbox", "--env", env)

    data = json.loads(cache.read_text())
    data["facts"]["image"] = "sha256:another-image\n"  # as if the image had been rebuilt since
    cache.write_text(json.dumps(data))
    changed = test_env.run("-v", "up", "testbox", "--env", env, "--detach")
    assert FULL in changed.stderr and STANDS not in changed.stderr
    assert json.loads(cache.read_text())["facts"]["image"] != "sha256:another-image\n"  # the host's, anew
    assert test_env.state() == "running"
