"""The layer rules of docs/design (pure core < adapters < services < front ends), checked mechanically:
each module is imported in a fresh interpreter and the heavy modules it pulled in are listed."""

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


@pytest.mark.parametrize("module", MODULES)
def test_layer_imports(module):
    code = (f"import json, sys, importlib; importlib.import_module({module!r}); "
            "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout))
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
