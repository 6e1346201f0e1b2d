"""The CLI loads commands lazily: `devenv --help` imports no command module and nothing heavy, yet lists
every command exactly as the loaded commands describe themselves; `devenv CMD --help` works for each one."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from devenv.cli import COMMANDS, main

REPO = Path(__file__).resolve().parent.parent
HEAVY = ("paramiko", "docker", "textual", "rich", "yaml", "requests", "urllib3", "cryptography")


def _modules_after(args: list[str]) -> tuple[int, list[str]]:
    """(exit code, modules imported) of `devenv ARGS` in a fresh interpreter."""
    code = ("import json, sys\nfrom devenv.cli import main\n"
            f"try:\n    main({args!r}, prog_name='devenv')\n"
            "except SystemExit as e:\n    rc = e.code or 0\n"
            "print('\\n@@' + json.dumps([rc, sorted(sys.modules)]))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    rc, modules = json.loads(done.stdout.rsplit("@@", 1)[1])
    return rc, modules


def test_help_imports_no_command_and_nothing_heavy():
    rc, modules = _modules_after(["--help"])
    assert rc == 0
    loaded_commands = [m for m in modules if m.startswith("devenv.cli.") and m.endswith("_cmd")]
    assert loaded_commands == []
    assert [m for m in modules if m.split(".")[0] in HEAVY] == []
    assert [m for m in modules if m.startswith(("devenv.remote", "devenv.runtimes", "devenv.services"))] == []


def test_a_command_loads_only_its_own_module():
    rc, modules = _modules_after(["compat", "--help"])
    assert rc == 0
    assert [m for m in modules if m.startswith("devenv.cli.") and m.endswith("_cmd")] == ["devenv.cli.compat_cmd"]
    assert "paramiko" not in modules and "docker" not in modules


def test_every_listed_command_is_known_and_every_command_is_listed():
    for name, (module, _summary) in COMMANDS.items():
        importlib.import_module(f"devenv.cli.{module}")
        assert name in main.commands, f"devenv.cli.{module} did not register `{name}`"
    assert sorted(main.commands) == sorted(COMMANDS), "a command registered on main is missing from COMMANDS"


@pytest.mark.parametrize("width", [80, 120, 250])
def test_lazy_listing_equals_the_loaded_commands_listing(width):
    """The summaries in COMMANDS say what the commands' own docstrings say (at every terminal width)."""
    group = main
    lazy = click.Group.__new__(type(group))
    lazy.__dict__.update(group.__dict__)
    lazy.commands = {}  # as in a fresh process: nothing loaded
    for module, _ in COMMANDS.values():
        importlib.import_module(f"devenv.cli.{module}")

    def listing(g: click.Group) -> str:
        ctx = click.Context(g, info_name="devenv", terminal_width=width, max_content_width=width)
        formatter = ctx.make_formatter()
        g.format_commands(ctx, formatter)
        return formatter.getvalue()

    original = lazy.get_command
    lazy.get_command = lambda ctx, name: (_ for _ in ()).throw(AssertionError(f"listing loaded {name}"))  # type: ignore[method-assign]
    try:
        text = listing(lazy)
    finally:
        lazy.get_command = original  # type: ignore[method-assign]
    assert text == listing(click.Group("devenv", commands=dict(main.commands)))


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_shows_its_help(name):
    result = CliRunner().invoke(main, [name, "--help"])
    assert result.exit_code == 0, result.output
    assert f"Usage: devenv {name}" in result.output or f"Usage: main {name}" in result.output
    command = main.commands[name]
    if isinstance(command, click.Group):
        for sub in command.commands:
            sub_result = CliRunner().invoke(main, [name, sub, "--help"])
            assert sub_result.exit_code == 0, sub_result.output


def _modules_of_python_m_devenv(args: list[str], home: Path) -> tuple[int, str, list[str]]:
    """(exit code, output, modules imported at exit) of `python -m devenv ARGS`, as a user runs it, in a fresh
    interpreter whose DEVENV_HOME is home; the replayed nvidia-smi (tests/replay) is on PATH."""
    code = ("import atexit, json, runpy, sys\n"
            "atexit.register(lambda: print('\\n@@' + json.dumps(sorted(sys.modules))))\n"
            f"sys.argv = ['devenv', *{args!r}]\n"
            "runpy.run_module('devenv', run_name='__main__', alter_sys=True)\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "DEVENV_HOME": str(home),
           "PATH": os.pathsep.join([str(REPO / "tests" / "replay"), os.environ["PATH"]])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60,
                          env=env)
    output, _, modules = done.stdout.rpartition("\n@@")
    return done.returncode, output + done.stderr, json.loads(modules)


@pytest.mark.parametrize("args", [["--help"], ["gpus", "local"]])
def test_python_m_devenv_on_this_machine_imports_no_ssh_library(args, tmp_path):
    """paramiko (and cryptography under it) is imported only when a host is really dialled over SSH: `--help`
    and a command against the `local` host (here, with the replayed nvidia-smi) never pay for it."""
    rc, output, modules = _modules_of_python_m_devenv(args, tmp_path)
    assert rc == 0, output
    if args != ["--help"]:
        assert "local" in output, output   # the command really ran against the local host
    assert [m for m in modules if m.split(".")[0] in ("paramiko", "cryptography", "invoke")] == []
    assert "devenv.remote.ssh" not in modules and "devenv.remote.sshlib" not in modules


def test_connecting_commands_import_paramiko_and_docker_without_invoke():
    """paramiko imports invoke only for its own ssh_config's `Match exec`, which devenv does not use."""
    code = ("import sys\nimport devenv.runtimes.docker_runtime, devenv.remote.pool\n"
            "import paramiko.config\n"
            "print('invoke' in sys.modules, paramiko.config.invoke is None)\n"
            "import invoke\nprint(invoke.__name__)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    # not loaded by devenv; and a later `import invoke` by someone else still works
    assert done.stdout.split() == ["False", "True", "invoke"]
