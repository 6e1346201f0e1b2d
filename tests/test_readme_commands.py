"""The README says only what devenv does (issue 28, point 8): every `devenv ...` command line it shows names a
command that exists and options that command takes (a renamed flag or a command that went away fails here)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click

from devenv.cli import main

README = Path(__file__).resolve().parents[1] / "README.md"


def _command_lines() -> list[str]:
    text = README.read_text()
    lines = []
    in_block = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_block = not in_block
            continue
        if in_block and line.lstrip().startswith("devenv "):
            lines.append(line.strip().split("  #", 1)[0])
    lines += [m.group(1) for m in re.finditer(r"`(devenv [^`]+)`", text)]
    return [line.split(" | ")[0] for line in lines]


def _options(command: click.Command) -> set[str]:
    return {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)} | {"--help", "-h"}


def test_every_readme_command_names_a_real_command_and_its_options():
    lines = _command_lines()
    assert len(lines) > 30, lines  # the README shows the loop: most of it is command lines
    for line in lines:
        problem = _problem(line)
        assert problem is None, f"README: `{line}`: {problem}"


def test_the_check_itself_finds_a_wrong_flag_and_a_missing_command():
    assert _problem("devenv sync gpu1 --bogus") == "sync takes no --bogus"
    assert _problem("devenv hosts lst") == "no command 'lst'"
    assert _problem("devenv tunnel gpu1 16006:6006 --json") is None


def _problem(line: str) -> str | None:
    """What is wrong with one README command line, or None."""
    ctx = click.Context(main)
    try:
        words = shlex.split(line.replace("[", " ").replace("]", " ").replace("...", " "))
    except ValueError:
        words = line.split()
    words = words[1:]
    command: click.Command = main
    while words and words[0].startswith("-") and words[0] in _options(main):
        words = words[1:]
    while isinstance(command, click.Group) and words and not words[0].startswith("-"):
        sub = command.get_command(ctx, words[0])
        if sub is None:
            return f"no command {words[0]!r}"
        command, words = sub, words[1:]
    for word in words:
        if word == "--":
            break
        if word.startswith("-") and word != "-":
            flag = word.split("=", 1)[0]
            if flag not in _options(command):
                return f"{command.name} takes no {flag}"
    return None
