"""The layer rules of docs/design (pure core < adapters < services < front ends), checked mechanically:
each module is imported in a fresh interpreter and the heavy modules it pulled in are listed.

The fresh interpreters are forks of one (`importer`): started as `python -c` starts, it forks a child per module,
which imports it and reports what is loaded, the same modules a new `python -c` would hold, without paying the
interpreter's start-up once per module (~110 starts were ~20 s of CPU, a sixth of `scripts/test --quick`)."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import pytest

import devenv

FORBIDDEN = {
    "L0": {"paramiko", "docker", "textual", "click", "torch", "rich"},
    "L1": {"textual", "click", "torch"},
    "L2": {"paramiko", "docker", "textual", "click", "torch"},
}


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    if module.startswith("devenv.sanity.scripts"):
        return None  # runs on the GPU host with torch, never imported by the laptop side
    if len(parts) > 1 and parts[1] in ("cli", "tui"):
        return "L3"
    if len(parts) > 1 and parts[1] in ("remote", "runtimes", "schedulers"):
        return "L1"
    if len(parts) > 1 and parts[1] == "services":
        return "L2"
    return "L0"


def all_modules() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(devenv.__path__, "devenv."):
        if ".sanity.scripts" in info.name or info.name.endswith("__main__"):
            continue
        names.append(info.name)
    return names


MODULES = [m for m in all_modules() if layer_of(m) in FORBIDDEN]


# Reads one module name a line; for each, a forked child imports it and the server writes one JSON line: the
# top-level names in sys.modules after the import, or the import's traceback. It imports nothing of its own
# beyond what the old `python -c "import json, sys, importlib; ..."` per module did (os is always loaded).
IMPORTER = r"""
import json, os, sys, importlib
for line in sys.stdin:
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            importlib.import_module(line.strip())
            said = {"loaded": sorted({m.split('.')[0] for m in sys.modules})}
        except BaseException:
            import traceback
            said = {"error": traceback.format_exc()}
        with os.fdopen(write_end, "w") as out:
            out.write(json.dumps(said))
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as child:
        said = child.read()
    os.waitpid(pid, 0)
    print(said or json.dumps({"error": "the child died before it said anything"}), flush=True)
"""


@pytest.fixture(scope="module")
def importer():
    server = subprocess.Popen([sys.executable, "-c", IMPORTER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)

    def loaded_by(module: str) -> set[str]:
        assert server.stdin is not None and server.stdout is not None
        server.stdin.write(module + "\n")
        server.stdin.flush()
        said = json.loads(server.stdout.readline() or '{"error": "the importer ended"}')
        assert "error" not in said, said["error"]
        return set(said["loaded"])

    try:
        yield loaded_by
    finally:
        assert server.stdin is not None
        server.stdin.close()
        server.wait(timeout=60)


@pytest.mark.parametrize("module", MODULES)
def test_layer_imports(module, importer):
    loaded = importer(module)
    bad = FORBIDDEN[layer_of(module)] & loaded
    assert not bad, f"{module} ({layer_of(module)}) imports {sorted(bad)}"


def test_services_do_not_import_adapters_directly():
    """L2 takes a connection or runtime as an argument: it may name the interfaces, not build paramiko ones."""
    code = ("import sys, importlib, pkgutil, devenv.services as s\n"
            "for i in pkgutil.iter_modules(s.__path__, 'devenv.services.'): importlib.import_module(i.name)\n"
            "print('devenv.remote.ssh' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
