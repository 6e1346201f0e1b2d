"""The type gate's reach, held to a floor: scripts/typecheck-coverage reads [tool.mypy] through mypy's own config
reader and says which modules get every strict flag and which are exempt (ignore_errors)."""

from __future__ import annotations

import importlib.util
import sys
from importlib.machinery import SourceFileLoader
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parent.parent
STRICT_FLAGS = """
check_untyped_defs = true
strict_equality = true
warn_unused_ignores = true
disallow_untyped_defs = true
disallow_incomplete_defs = true
disallow_untyped_calls = true
disallow_untyped_decorators = true
disallow_any_generics = true
disallow_subclassing_any = true
warn_return_any = true
no_implicit_reexport = true
extra_checks = true
"""


def load_measurer() -> ModuleType:
    path = REPO / "scripts" / "typecheck-coverage"
    loader = SourceFileLoader("typecheck_coverage", str(path))
    spec = importlib.util.spec_from_loader("typecheck_coverage", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["typecheck_coverage"] = module  # dataclasses look their module up
    loader.exec_module(module)
    return module


measurer = load_measurer()


def test_strict_covers_the_floor_and_few_modules_are_exempt() -> None:
    coverage = measurer.measure()
    assert coverage.problems() == [], f"strict share {coverage.share:.1%}, exempt: {[m.name for m in coverage.exempt]}"
    assert coverage.share >= 0.80
    assert len(coverage.exempt) <= 5


def test_every_exempt_module_says_why() -> None:
    text = (REPO / "pyproject.toml").read_text()
    exempting = [part for part in text.split("[[tool.mypy.overrides]]") if "\nignore_errors = true" in part]
    lines = [line for part in exempting for line in part.splitlines()]
    for module in measurer.measure().exempt:
        line = next(line for line in lines if f'"{module.name}"' in line)
        why = line.partition("#")[2].strip()
        assert len(why) > 20, f"{module.name} is exempt from mypy without a reason on its line: {line.strip()}"


def test_a_module_both_strict_and_exempt_is_named(tmp_path: Path) -> None:
    config = tmp_path / "pyproject.toml"
    config.write_text(
        f'[tool.mypy]\n{STRICT_FLAGS}\n[[tool.mypy.overrides]]\nmodule = ["devenv.errors"]\nignore_errors = true\n'
    )
    coverage = measurer.measure(config)
    assert [m.name for m in coverage.strict_and_exempt] == ["devenv.errors"]
    assert any("devenv.errors is both strict and exempt" in p for p in coverage.problems())


def test_a_relaxed_override_takes_the_module_out_of_the_strict_share(tmp_path: Path) -> None:
    config = tmp_path / "pyproject.toml"
    config.write_text(
        f'[tool.mypy]\n{STRICT_FLAGS}\n[[tool.mypy.overrides]]\nmodule = ["devenv.cli.*"]\nwarn_return_any = false\n'
    )
    coverage = measurer.measure(config)
    loose = {m.name: m.missing for m in coverage.modules if not m.strict}
    assert loose and all(name == "devenv.cli" or name.startswith("devenv.cli.") for name in loose)
    assert all(missing == ("warn_return_any",) for missing in loose.values())
    assert coverage.strict_lines == coverage.total_lines - sum(m.lines for m in coverage.modules if m.name in loose)


def test_without_strict_flags_nothing_counts(tmp_path: Path) -> None:
    config = tmp_path / "pyproject.toml"
    config.write_text("[tool.mypy]\ncheck_untyped_defs = true\n")
    coverage = measurer.measure(config)
    assert coverage.strict_lines == 0
    assert coverage.problems()[0].startswith("strict covers 0.0%")
