"""`python3 tests/contract/memory_devenv.py ARGS...`: devenv's CLI, with the in-memory backend serving the hosts of
`runtime: docker` (the one line a backend outside devenv needs to join the registry)."""

import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent.parent)]

from memory_backend import MemoryBackend  # noqa: E402

from devenv.cli import main  # noqa: E402
from devenv.services.environments import registry  # noqa: E402

registry.register("docker", MemoryBackend)

if __name__ == "__main__":
    main(prog_name="devenv")
