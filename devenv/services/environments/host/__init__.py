"""Environments on the bare host: Jupyter and the env's processes run by the host's python."""
