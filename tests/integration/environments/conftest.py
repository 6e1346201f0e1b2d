"""The environment tests' fixtures; they and the helpers the tests import live in env_testing.py (a name of its
own: `from conftest import ...` reads whichever conftest was imported last when several folders are collected)."""

from env_testing import host_python, podman_slim_image, slim_image, test_env  # noqa: F401  (fixtures, by name)

from testhost import apply_testhost_env, testhost, testhost_env  # noqa: F401  (fixtures, used by name)
