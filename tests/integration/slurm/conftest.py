"""The Slurm tests' fixtures; they and the helpers the tests import live in slurm_testing.py (a name of its own:
`from conftest import ...` reads whichever conftest was imported last when several folders are collected)."""

from slurm_testing import cluster, cluster_python  # noqa: F401  (fixtures, used by name)

from testhost import apply_testhost_env, testhost, testhost_dir, testhost_env  # noqa: F401  (fixtures)
