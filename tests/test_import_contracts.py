"""The import-linter contracts of pyproject.toml bite: on a copy of the package, one wrong import per contract
makes `lint-imports` fail and name that contract, while the untouched copy passes (so the failure is the import's).
tests/test_layers.py checks the same rules from the other side, by importing each module in a fresh interpreter."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# (module file to spoil, the import added to it, the contract id that must break)
WRONG_IMPORTS = [
    ("devenv/gpu/format.py", "import paramiko", "pure-core"),
    ("devenv/checks/report.py", "from devenv.remote import ssh", "pure-core"),
    ("devenv/config/paths.py", "import devenv.services.monitor", "layers"),
    ("devenv/remote/base.py", "import devenv.cli.common", "layers"),
    ("devenv/tui/monitor_view.py", "from devenv.runtimes import docker_runtime", "tui-no-adapter"),
    ("devenv/tui/monitor_view.py", "import docker", "tui-no-ssh-docker"),
    ("devenv/services/jupyter.py", "import paramiko", "only-adapters-touch-ssh-docker"),
    ("devenv/gpu/sample.py", "import torch", "torch-on-gpu-host-only"),
]


def copy_tree(dest: Path) -> Path:
    shutil.copytree(REPO / "devenv", dest / "devenv", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", dest / "pyproject.toml")
    return dest


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    # the copy must be the devenv that grimp finds: it goes first on the path, and the run starts in it
    env = {**os.environ, "PYTHONPATH": str(root)}
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run([sys.executable, "-c", code, "--no-cache", "--config", str(root / "pyproject.toml")],
                          cwd=root, env=env, capture_output=True, text=True, timeout=120)


def contract_names(root: Path) -> dict[str, str]:
    import tomllib

    config = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["importlinter"]
    return {c["id"]: c["name"] for c in config["contracts"]}


def test_the_tree_keeps_every_contract(tmp_path):
    done = lint_imports(copy_tree(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


@pytest.mark.parametrize(("path", "line", "contract"), WRONG_IMPORTS, ids=[w[2] + ":" + w[0] for w in WRONG_IMPORTS])
def test_a_wrong_import_breaks_its_contract(tmp_path, path, line, contract):
    root = copy_tree(tmp_path)
    target = root / path
    target.write_text(target.read_text() + f"\n{line}  # deliberately wrong\n")
    done = lint_imports(root)
    assert done.returncode != 0, f"lint-imports passed with `{line}` in {path}:\n{done.stdout}"
    name = contract_names(root)[contract]
    # the broken contract is reported by name under "Broken contracts", with the offending module
    broken = " ".join(done.stdout.split("Broken contracts", 1)[-1].split())  # long names wrap at 80 columns
    assert name in broken, done.stdout
    assert path[:-3].replace("/", ".") in broken, done.stdout
