"""Environment backends (L2): the contract every backend honours, the registry of backends, and one
folder per backend (docker, host, slurm) holding its steps, its check and what its monitor samples."""
