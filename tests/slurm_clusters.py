"""The test host's two Slurm clusters, and which tests run on which.

testhost/setup makes two clusters on this machine: the first (ClusterName devenv, /etc/slurm/slurm.conf, nodes
node1 + node2, state under <testhost dir>/slurm), logged into as `testbox` (the test sshd's port, 2201), and the
second (devenv2, <testhost dir>/slurm2/slurm.conf, node3 + node4, job ids from 200000), logged into as
`testbox-cluster2`: the same sshd on its second port (2202), whose logins get that cluster's SLURM_CONF.

A Slurm test has one cluster to itself: the tests of one cluster are one xdist group (tests/conftest.py), run one
after another, because they drain it, fill it, stop its controller or a slurmd, or need both of its nodes. Two
clusters make two such chains that run side by side on two workers. Each Slurm test runs with its cluster's
SLURM_CONF in the environment (the autouse fixture `slurm_cluster_env` in tests/integration/slurm/conftest.py; the
behaviour suite's Slurm place passes it itself), so every Slurm command a test runs here (squeue, scancel,
scontrol, slurmd) reaches its own cluster and no other.

Which tests go to the second cluster (CLUSTER2_MODULES, and the behaviour suite's Slurm place): the split is by
measured duration, the two chains about equal (docs/benchmarks.md, "CI and test times").
DEVENV_TEST_SLURM_CLUSTERS=1 puts every Slurm test on the first cluster, one chain, as before the split (to measure
against, or on a test host made before the second cluster).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from testhost import testhost_dir

FIRST_CONF = Path("/etc/slurm/slurm.conf")


@dataclass(frozen=True)
class SlurmCluster:
    """One of the test host's Slurm clusters, as the tests reach it."""

    group: str            # its xdist group: its tests run one after another on one worker
    alias: str            # the ssh alias of its login node (the test sshd) in the test host's ssh_config
    profile: str          # the host profile testhost/setup writes for it
    first_node: int       # its nodes: node<first_node>, node<first_node + 1>
    state: str            # the folder of its pid files and logs under the test host's dir
    second: bool

    @property
    def nodes(self) -> tuple[str, str]:
        return f"node{self.first_node}", f"node{self.first_node + 1}"

    @property
    def state_dir(self) -> Path:
        return testhost_dir() / self.state

    @property
    def conf(self) -> Path:
        """Its slurm.conf: what SLURM_CONF names for every Slurm command that must reach it."""
        return self.state_dir / "slurm.conf" if self.second else FIRST_CONF

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    @property
    def login_port(self) -> int:
        """Its login node's port on 127.0.0.1, as the test host's ssh_config says."""
        lines = (testhost_dir() / "ssh_config").read_text().splitlines()
        in_host = False
        for line in lines:
            words = line.split()
            if words[:1] == ["Host"]:
                in_host = words[1:] == [self.alias]
            elif in_host and words[:1] == ["Port"]:
                return int(words[1])
        raise AssertionError(f"no Host {self.alias} with a Port in {testhost_dir() / 'ssh_config'}: run "
                             "testhost/setup again (it makes the second Slurm cluster)")


CLUSTER1 = SlurmCluster("slurm-cluster1", "testbox", "testcluster", 1, "slurm", second=False)
CLUSTER2 = SlurmCluster("slurm-cluster2", "testbox-cluster2", "testcluster2", 3, "slurm2", second=True)
CLUSTERS = (CLUSTER1, CLUSTER2)
# the cluster of the behaviour suite's Slurm place (tests/contract): its cases share one environment and made
# ~45 % of the single chain
CONTRACT_CLUSTER = CLUSTER2

# The second cluster's other tests: the lost-connection cases (they fill their cluster and wait out a cut link) and
# the CLI's two-node end to end (moved from cluster 1 when the Slurm autostop case joined it: in the .ci/run of
# 2026-12-07 03:23 UTC cluster 1's chain carried ~500 s of its slowest tests against ~110 s of cluster 2's besides
# the behaviour suite; docs/benchmarks.md, "CI and test times").
CLUSTER2_MODULES = frozenset({"test_slurm_lost_connection.py", "test_slurm_cli_e2e.py"})


def one_cluster() -> bool:
    return os.environ.get("DEVENV_TEST_SLURM_CLUSTERS", "2") == "1"


def contract_cluster() -> SlurmCluster:
    """The cluster of the behaviour suite's Slurm place."""
    return CLUSTER1 if one_cluster() else CONTRACT_CLUSTER


def cluster_of(item: pytest.Item) -> SlurmCluster | None:
    """The cluster a test runs on, None for a test that uses no Slurm cluster."""
    second = CLUSTER1 if one_cluster() else CLUSTER2
    fixtures = set(getattr(item, "fixturenames", ()))
    callspec = getattr(item, "callspec", None)
    params = callspec.params if callspec is not None else {}
    if isinstance(params.get("slurm_cluster"), SlurmCluster):   # a test of that cluster itself (test_testhost.py)
        return params["slurm_cluster"]
    place = params.get("place")
    if place == "slurm":
        return contract_cluster()
    if "cluster" in fixtures or item.get_closest_marker("slurm") is not None:
        return second if Path(str(item.fspath)).name in CLUSTER2_MODULES else CLUSTER1
    return None


def current() -> SlurmCluster:
    """The cluster the running test was given (by the SLURM_CONF its fixture set); the first one otherwise."""
    conf = os.environ.get("SLURM_CONF")
    for cluster in CLUSTERS:
        if conf and Path(conf) == cluster.conf:
            return cluster
    return CLUSTER1
