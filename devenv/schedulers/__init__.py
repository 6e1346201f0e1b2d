"""Scheduler adapters (L1): a cluster's own tools, run on its login node through a devenv Connection."""
