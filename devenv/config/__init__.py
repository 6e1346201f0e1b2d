"""Profiles and where devenv keeps its files (L0)."""
