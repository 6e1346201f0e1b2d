"""Zero branches on the kind of backend outside services/environments/ (issue 22): the CLI, the TUI and the
services ask the backend (its class or an instance) instead. Read from the source's syntax tree: a RuntimeKind
member named, a host's `runtime` compared with a kind's name, or a Traits flag read, is a branch on the kind."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from devenv.services.environments.contract import Traits

ROOT = Path(__file__).resolve().parent.parent / "devenv"
WATCHED = [ROOT / "cli", ROOT / "tui", ROOT / "services"]
BACKENDS = ROOT / "services" / "environments"   # the only place that may know the kinds
KIND_NAMES = {"docker", "host", "slurm", "auto"}
OLD_FLAGS = {"containers", "shell_on_host", "scheduled"}   # Traits' flags before the contract (never again)


def kind_branches(source: str) -> list[str]:
    """Each branch on the kind in source, as 'line: what'."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id == "RuntimeKind":
                found.append(f"{node.lineno}: RuntimeKind.{node.attr}")
            elif node.attr in OLD_FLAGS and _names_traits(node.value):
                found.append(f"{node.lineno}: traits.{node.attr}")
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(isinstance(s, ast.Attribute) and s.attr == "runtime" for s in sides):
                words = {s.value for s in ast.walk(node) if isinstance(s, ast.Constant) and isinstance(s.value, str)}
                if words & KIND_NAMES:
                    found.append(f"{node.lineno}: runtime compared with {sorted(words & KIND_NAMES)}")
    return found


def _names_traits(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and "traits" in node.id) or (isinstance(node, ast.Attribute)
                                                                    and "traits" in node.attr)


def watched_files() -> list[Path]:
    return sorted(p for folder in WATCHED for p in folder.rglob("*.py") if BACKENDS not in p.parents)


@pytest.mark.parametrize("source, expected", [
    ("if host.runtime is RuntimeKind.SLURM: pass", "RuntimeKind.SLURM"),
    ("if session.traits.containers: pass", "traits.containers"),
    ("ok = traits.shell_on_host", "traits.shell_on_host"),
    ("if profile.runtime == 'slurm': pass", "runtime compared with ['slurm']"),
    ("x = host.runtime in ('docker', 'host')", "runtime compared with ['docker', 'host']"),
])
def test_the_checker_finds_each_kind_of_branch(source, expected):
    assert [f.split(": ", 1)[1] for f in kind_branches(source)] == [expected]


def test_the_checker_passes_what_asks_the_backend():
    assert kind_branches("if session.kind.shell is Shell.HOST and backend.builds_images: pass") == []


def test_no_branch_on_the_kind_outside_the_backends():
    files = watched_files()
    assert len(files) > 40   # the walk finds the CLI, the TUI and the services
    found = [f"{p.relative_to(ROOT.parent)}:{line}" for p in files for line in kind_branches(p.read_text())]
    assert found == [], "ask the backend (services/environments/contract.py) instead:\n" + "\n".join(found)


def test_traits_are_words_only():
    """Traits present a kind to people; a flag there would invite a branch on it again."""
    kinds = {f.name: f.type for f in dataclasses.fields(Traits)}
    assert kinds and set(kinds.values()) == {"str"}
