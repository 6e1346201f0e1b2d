"""Environments as containers of the host's Docker or podman engine."""
