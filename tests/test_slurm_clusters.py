"""tests/slurm_clusters.py, which gives each Slurm test one of the test host's two clusters: its login port read from
the test host's ssh_config (never a hard-coded port), its SLURM_CONF, and DEVENV_TEST_SLURM_CLUSTERS=1 (one chain)."""

from __future__ import annotations

import pytest
import slurm_clusters
from slurm_clusters import CLUSTER1, CLUSTER2


def test_each_cluster_is_reached_through_its_own_alias_port_and_conf(tmp_path, monkeypatch):
    monkeypatch.setenv("DEVENV_TESTHOST_DIR", str(tmp_path))
    (tmp_path / "ssh_config").write_text(
        "Host testbox\n  HostName 127.0.0.1\n  Port 3301\n  User root\n\n"
        "Host testbox-nodocker\n  Port 3301\n\n"
        "# the second cluster\nHost testbox-cluster2\n  HostName 127.0.0.1\n  Port 3302\n")
    assert (CLUSTER1.login_port, CLUSTER2.login_port) == (3301, 3302)
    assert CLUSTER1.env == {"SLURM_CONF": "/etc/slurm/slurm.conf"}
    assert CLUSTER2.env == {"SLURM_CONF": str(tmp_path / "slurm2" / "slurm.conf")}
    assert CLUSTER2.nodes == ("node3", "node4") and CLUSTER2.state_dir == tmp_path / "slurm2"
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "slurm2" / "slurm.conf"))
    assert slurm_clusters.current() is CLUSTER2


def test_a_test_host_without_the_second_cluster_says_to_run_setup_again(tmp_path, monkeypatch):
    monkeypatch.setenv("DEVENV_TESTHOST_DIR", str(tmp_path))
    (tmp_path / "ssh_config").write_text("Host testbox\n  Port 3301\n")
    with pytest.raises(AssertionError, match="no Host testbox-cluster2 with a Port .* run testhost/setup again"):
        _ = CLUSTER2.login_port


def test_one_cluster_puts_the_behaviour_suites_slurm_place_on_the_first(monkeypatch):
    assert slurm_clusters.contract_cluster() is CLUSTER2
    monkeypatch.setenv("DEVENV_TEST_SLURM_CLUSTERS", "1")
    assert slurm_clusters.contract_cluster() is CLUSTER1
