"""Environments as Slurm jobs: the job, its check, the places the monitor samples, multi-node sanity."""
