"""Shared fixtures. Every test runs with DEVENV_HOME and the SSH files pointed at a temporary folder,
so no test reads the user's own profiles, ~/.ssh/config or known_hosts.

And the one rule of `-m integration`: it means exactly "needs the test host or root", and nobody marks a test
by hand. At collection each test is marked by what it uses (integration_marking.py): the test host's fixtures, or a
private sshd (sshd_fixture.SSHD, which needs root), reached through its fixtures and the functions and classes of
tests/ it calls. A test that runs the real sanity program on this machine's CPU torch (tens of seconds each) asks
for the `local_torch` fixture and is marked `torch`. The rest runs in-process, without root, in seconds:
`scripts/test --quick` (-m 'not integration and not torch').

scripts/test runs the test host's part with pytest-xdist workers (--dist loadgroup): it mostly waits on dockerd,
sshd and Slurm. Tests that share a limited resource get one xdist_group here (xdist_group_of), so they run one
after another on one worker; every other test has its own names, ports and DEVENV_HOME and runs anywhere."""

from __future__ import annotations

import importlib.util
import signal
from pathlib import Path

import pytest
import slurm_clusters
import sshd_fixture
from hypothesis import settings as hypothesis_settings
from integration_marking import NeedsFinder

FIXTURES = Path(__file__).parent / "fixtures"
_finder = NeedsFinder()

# The property tests' budget (fuzz_values.examples): 400 examples each in a full run, 150 in the inner loop
# (`scripts/test --quick` passes --hypothesis-profile=quick), where the fuzzers were a fifth of the CPU. Each
# property still runs on every commit in CI's full run with its 400.
hypothesis_settings.register_profile("full", max_examples=400)
hypothesis_settings.register_profile("quick", max_examples=150)
hypothesis_settings.load_profile("full")   # --hypothesis-profile (hypothesis' pytest plugin) loads another

# Ctrl-C as a terminal delivers it: tests that interrupt devenv (or this process) need SIGINT at its default. A
# suite started as a background job of a shell without job control (`scripts/test &`, CI runners, nohup-like
# wrappers) inherits SIGINT *ignored*, which survives exec into every devenv the tests start, so their Ctrl-C
# would do nothing. Python's own handler here makes each child start with the default again.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


# The groups. slurm-cluster1 and slurm-cluster2: each of the test host's two Slurm clusters is one resource
# (tests/slurm_clusters.py says which tests run on which). Its tests drain both nodes, fill the queue, stop slurmctld
# or a slurmd, need both nodes for one job: beside each other on one cluster they would wait behind, or cancel, one
# another's jobs; the two clusters' chains run side by side. contract-<backend>: the behaviour suite's cases of one
# backend share one environment (the module-scoped `place`): made once, not once per worker. podman: rootful podman
# and the slim image it builds once (podman_slim_image).
def xdist_group_of(item: pytest.Item) -> str | None:
    cluster = slurm_clusters.cluster_of(item)
    if cluster is not None:
        return cluster.group
    callspec = getattr(item, "callspec", None)
    place = callspec.params.get("place") if callspec is not None else None
    if place is not None:
        return f"contract-{place}"
    if "podman_slim_image" in set(getattr(item, "fixturenames", ())):
        return "podman"
    if Path(str(item.fspath)).name == "test_image_push.py":
        # the push tests judge /var/tmp for a killed load's leftovers: another push beside them (its temp dir
        # alive while it loads) made two cut cases fail in .ci/run, one each run
        return "image-push"
    return None


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook, which reads the xdist_group marks
def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        group = xdist_group_of(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
        needs = _finder.needs_of(item)
        marked = item.get_closest_marker("integration") is not None
        if needs and not marked:
            item.add_marker(pytest.mark.integration(reason=", ".join(sorted(needs))))
        # the finer split (scripts/test runs the two kinds side by side: they wait on different things); a test
        # marked by hand whose need the walk does not see (a parameter's mark: the behaviour suite's backends)
        # is counted with the test host's
        if "test host" in needs or (marked and not needs):
            item.add_marker(pytest.mark.testhost)
        if "root" in needs:
            item.add_marker(pytest.mark.root)
        if "local_torch" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.torch)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item) -> None:
    # The safety net under the marking: a test not marked integration that starts an sshd anyway (through a path
    # the walk does not follow: getattr, a name in a string) fails there, saying why, instead of passing here
    # and failing in `scripts/test --quick` on a machine without root.
    sshd_fixture.ROOT_ALLOWED = item.get_closest_marker("integration") is not None


@pytest.fixture(autouse=True)
def isolated_home(tmp_path_factory, monkeypatch) -> Path:
    home = tmp_path_factory.mktemp("devenv-home")
    monkeypatch.setenv("DEVENV_HOME", str(home))
    monkeypatch.setenv("DEVENV_SSH_CONFIG", str(home / "ssh_config"))
    monkeypatch.setenv("DEVENV_KNOWN_HOSTS", str(home / "known_hosts"))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    # settings a user (or a sourced .testhost/env) may have exported; tests that want one set it themselves
    for name in ("DEVENV_ENV", "DEVENV_WHEELHOUSE", "DEVENV_BUILD_CA_BUNDLE", "DEVENV_TUNNEL", "DEVENV_OWNER",
                 "DEVENV_SSH_KEY", "DEVENV_BUILD_CONTEXT", "DEVENV_BUILD_VENV"):
        monkeypatch.delenv(name, raising=False)
    return home


@pytest.fixture
def local_torch() -> None:
    """This test runs the real sanity program on this machine's CPU torch (marked `torch`: not in --quick)."""
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed here (the program needs it; the laptop does not)")


from testhost import testhost, testhost_env, use_testhost  # noqa: E402,F401  (the real test host's fixtures)
