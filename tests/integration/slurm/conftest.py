"""The Slurm tests' fixtures; they and the helpers the tests import live in slurm_testing.py (a name of its own:
`from conftest import ...` reads whichever conftest was imported last when several folders are collected)."""

import pytest
import slurm_clusters
from slurm_testing import cluster, cluster_python  # noqa: F401  (fixtures, used by name)

from testhost import apply_testhost_env, testhost, testhost_dir, testhost_env  # noqa: F401  (fixtures)


@pytest.fixture(autouse=True)
def slurm_cluster_env(request, monkeypatch) -> None:
    """A Slurm test runs with its cluster's SLURM_CONF (tests/slurm_clusters.py): every Slurm command it runs here
    (squeue, scancel, scontrol, slurmctld, slurmd) reaches that cluster only. Here, not in tests/conftest.py: an
    autouse fixture there would make every test look like it needs the test host (integration_marking.py)."""
    cluster = slurm_clusters.cluster_of(request.node)
    if cluster is not None:
        monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
