"""The behaviour suite's one fixture: `place`, a backend on its host with one environment the cases share
(module-scoped: an environment is made once per backend, and each case leaves it as the next expects)."""

from __future__ import annotations

import secrets
import shutil
import time
from pathlib import Path

import pytest
from places import DockerPlace, HostPlace, Place, SlurmPlace, base_environ, cluster_python, memory_place
from slurm_clusters import contract_cluster
from sshd_fixture import free_port

from testhost import testhost, testhost_env  # noqa: F401  (fixtures, used through getfixturevalue)

# The real backends use the shared test host (its dockerd, sshd and Slurm cluster), reached through `place`'s
# getfixturevalue, which the marking walk cannot see: they say so themselves, so that scripts/test runs them in
# the test host's part, one at a time with the tests that drain or fill the cluster, not beside them.
ON_TESTHOST = [pytest.mark.integration, pytest.mark.testhost]
BACKENDS = [
    pytest.param("memory", id="memory"),
    pytest.param("docker", marks=ON_TESTHOST, id="docker"),
    pytest.param("host", marks=ON_TESTHOST, id="host"),
    pytest.param("slurm", marks=ON_TESTHOST, id="slurm"),
]


def _real_place(kind: str, request: pytest.FixtureRequest, home: Path) -> Place:
    from places import Wait

    host_under_test = request.getfixturevalue("testhost")
    shutil.copytree(host_under_test.env["DEVENV_HOME"], home, dirs_exist_ok=True)
    known_hosts = home / "known_hosts"
    shutil.copy2(host_under_test.env["DEVENV_KNOWN_HOSTS"], known_hosts)
    extra = {"DEVENV_SSH_CONFIG": host_under_test.env["DEVENV_SSH_CONFIG"], "DEVENV_KNOWN_HOSTS": str(known_hosts)}
    for name in ("DEVENV_BUILD_CA_BUNDLE", "DEVENV_WHEELHOUSE"):
        if name in host_under_test.env:
            extra[name] = host_under_test.env[name]
    env = f"c{kind[:4]}{secrets.token_hex(2)}"
    environ = base_environ(home, {**extra, "DEVENV_ENV": env})   # testbox's own default is `cpu`
    waiting = Wait("waiting for jupyter", r"==> (Waiting for jupyter|Job \d+ running on .*waiting for Jupyter)")
    if kind == "docker":
        place: Place = DockerPlace(kind, "testbox", env, home, environ, waits=(waiting,))
        place.ports = {"jupyter": free_port(), "ssh": free_port()}  # type: ignore[attr-defined]
        place.write_profile()  # type: ignore[attr-defined]
    elif kind == "host":
        place = HostPlace(kind, f"bare-{env}", env, home, environ, waits=(waiting,))
        python = cluster_python(home)
        (home / "profiles" / "hosts" / f"bare-{env}.yaml").write_text(
            f"description: the test host without Docker\nssh:\n  alias: testbox\nruntime: host\n"
            f"python: {python}\ndefault_env: {env}\n")
        place.write_profile(free_port())  # type: ignore[attr-defined]
    else:
        place = SlurmPlace(kind, f"tc-{env}", env, home, environ,
                           waits=(Wait("queued", r"==> Job \d+ pending"), waiting))
        place.python = cluster_python(home)  # type: ignore[attr-defined]
        place.login_port = contract_cluster().login_port   # its cluster's login node (tests/slurm_clusters.py)
        place.write_profile()  # type: ignore[attr-defined]
    return place


@pytest.fixture(scope="module", params=BACKENDS)
def place(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    kind = request.param
    home = tmp_path_factory.mktemp(f"contract-{kind}")
    started = time.monotonic()
    made = memory_place(home) if kind == "memory" else _real_place(kind, request, home)
    try:
        yield made
    finally:
        made.remove_everything()
        reporter = request.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"[contract] {kind}: {time.monotonic() - started:.1f} s for the suite's cases")


# What a backend does not do yet, each with the bug's words: the case runs and must fail (strict), so a fix
# shows as XPASS until its line here goes. Empty when every backend keeps the whole contract.
KNOWN_GAPS: dict[tuple[str, str], str] = {}
# Seen failing some of the time, not understood yet: xfail without strict, so that a pass is no error either. Each
# one is an open bug named in the session notes; take it out once fixed.
UNEXPLAINED: dict[tuple[str, str], str] = {}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is None or "place" not in callspec.params:
            continue
        reason = KNOWN_GAPS.get((getattr(item, "originalname", item.name), callspec.id))
        if reason:
            item.add_marker(pytest.mark.xfail(reason=reason, strict=True))
        unexplained = UNEXPLAINED.get((getattr(item, "originalname", item.name), callspec.id))
        if unexplained:
            item.add_marker(pytest.mark.xfail(reason=unexplained, strict=False))
