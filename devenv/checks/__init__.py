"""The one check model (L0) and what `check` asks a host and how each answer is judged."""
