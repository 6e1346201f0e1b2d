"""What a test needs, found from what it uses (tests/conftest.py marks the test `integration` when it needs one).

Two needs exist: the test host (testhost/setup's sshd, dockerd, Slurm: the `testhost_env` fixture and everything
built on it, or `testhost_dir`) and root (a private sshd: sshd_fixture.SSHD). A test needs one when the test
function, a fixture it uses (through the fixture closure), or a fixture it asks for by name with
request.getfixturevalue reaches one: following the names each function's code uses (its nested functions and
lambdas included, and the helper modules a body imports) to the functions and classes defined under tests/,
transitively. Nothing runs; the walk reads code objects, so helper modules need no annotations and new tests are
classified without anyone knowing.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import sshd_fixture

import testhost

THIS_FILE = Path(__file__).resolve()
TESTS = THIS_FILE.parent
HOST_FIXTURE = "testhost_env"  # every test host fixture (testhost, use_testhost, cluster, ...) is built on it


class NeedsFinder:
    """needs_of(item): the set of needs ("test host", "root") of one collected test; memoised per object."""

    def __init__(self) -> None:
        self._primitives: dict[int, str] = {id(sshd_fixture.SSHD): "root", id(testhost.testhost_dir): "test host"}
        self._memo: dict[int, frozenset[str]] = {}

    def needs_of(self, item: pytest.Item) -> frozenset[str]:
        found: set[str] = set()
        fixturenames = set(getattr(item, "fixturenames", ()))
        if HOST_FIXTURE in fixturenames:
            found.add("test host")
        info = getattr(item, "_fixtureinfo", None)
        defs = info.name2fixturedefs if info is not None else {}
        roots: list[Any] = [getattr(item, "function", None)]
        for name in fixturenames:
            roots.extend(d.func for d in defs.get(name, ()))
        # request.getfixturevalue("name"): a string constant of the test that names a fixture reachable here
        manager = item.session._fixturemanager
        function = getattr(item, "function", None)
        asks_by_name = inspect.isfunction(function) and "getfixturevalue" in _names_used(function.__code__)
        for text in _string_constants(function) if asks_by_name else ():
            if text.isidentifier() and text not in fixturenames:
                for fixturedef in manager.getfixturedefs(text, item) or ():
                    roots.append(fixturedef.func)
                    if text == HOST_FIXTURE or HOST_FIXTURE in fixturedef.argnames:
                        found.add("test host")
        for root in roots:
            found |= self.needs_of_function(root)
        return frozenset(found)

    def needs_of_function(self, function: Any) -> frozenset[str]:
        """What calling function (or a class of tests/) needs, by the walk described above."""
        return self._needs(function, ())

    def _needs(self, obj: Any, path: tuple[int, ...]) -> frozenset[str]:
        obj = _unwrapped(obj)
        key = id(obj)
        if key in self._primitives:
            return frozenset({self._primitives[key]})
        if key in self._memo:
            return self._memo[key]
        if key in path or not _defined_in_tests(obj):  # a cycle (its members are walked by the first visit)
            return frozenset()
        path = (*path, key)
        found: set[str] = set()
        if inspect.isfunction(obj):
            names = _names_used(obj.__code__)
            for name in names:
                target = obj.__globals__.get(name) or _helper_module(name)
                if isinstance(target, types.ModuleType):
                    # module.attr: the attribute names are among the code's names too
                    found |= self._needs_in_module(target, names, path)
                elif target is not None:
                    found |= self._needs(target, path)
            for cell in obj.__closure__ or ():
                try:
                    found |= self._needs(cell.cell_contents, path)
                except ValueError:  # an empty cell
                    pass
            for default in obj.__defaults__ or ():
                found |= self._needs(default, path)
        elif inspect.isclass(obj):
            for base in obj.__mro__:
                if base is not obj:
                    found |= self._needs(base, path)
                for member in vars(base).values():
                    if isinstance(member, (staticmethod, classmethod)):
                        member = member.__func__
                    elif isinstance(member, property):
                        member = member.fget
                    if inspect.isfunction(member):
                        found |= self._needs(member, path)
        result = frozenset(found)
        self._memo[key] = result
        return result

    def _needs_in_module(self, module: types.ModuleType, names: set[str], path: tuple[int, ...]) -> frozenset[str]:
        if not _defined_in_tests(module):
            return frozenset()
        found: set[str] = set()
        for name in names:
            target = vars(module).get(name)
            if target is not None and not isinstance(target, types.ModuleType):
                found |= self._needs(target, path)
        return frozenset(found)


@functools.cache
def _tests_module_names() -> frozenset[str]:
    """Every name a module under tests/ can be imported by: a .py file's stem, a package's folder. A body uses
    hundreds of other names (locals, attributes), and find_spec searched the whole sys.path for each of them."""
    return frozenset(p.parent.name if p.name == "__init__.py" else p.stem for p in TESTS.rglob("*.py"))


@functools.cache
def _helper_module(name: str) -> types.ModuleType | None:
    """The module of tests/ a function imports by name inside its body (`from monitor_helpers import x`)."""
    if name.startswith(("test_", "conftest")):
        return None
    if name in sys.modules:
        return sys.modules[name]
    if name not in _tests_module_names():  # no module of tests/ has that name: find_spec could not find one there
        return None
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not Path(spec.origin).resolve().is_relative_to(TESTS):
        return None
    return importlib.import_module(name)


def _unwrapped(obj: Any) -> Any:
    if isinstance(obj, types.MethodType):
        obj = obj.__func__
    if callable(obj):
        try:
            obj = inspect.unwrap(obj)  # @contextmanager, functools.wraps
        except ValueError:
            pass
    return obj


def _defined_in_tests(obj: Any) -> bool:
    if isinstance(obj, types.ModuleType):
        file = getattr(obj, "__file__", None)
    elif inspect.isfunction(obj) or inspect.isclass(obj):
        file = getattr(inspect.getmodule(obj), "__file__", None)
    else:
        return False
    return bool(file) and _file_in_tests(file)


@functools.cache
def _file_in_tests(file: str) -> bool:
    # this module names the needs without having them
    path = Path(file).resolve()
    return path.is_relative_to(TESTS) and path != THIS_FILE


def _codes(code: types.CodeType):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def _names_used(code: types.CodeType) -> set[str]:
    return {name for c in _codes(code) for name in c.co_names}


def _string_constants(function: Any) -> set[str]:
    if not inspect.isfunction(function):
        return set()
    return {const for c in _codes(function.__code__) for const in c.co_consts if isinstance(const, str)}
