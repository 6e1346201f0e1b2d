"""What `devenv sync` sends: a project's files as git sees them (L1: runs git here).

Git itself answers wherever it is installed: in a repository, `git ls-files` gives the tracked files and the
untracked ones no ignore rule hides (nested .gitignore files, negations, .git/info/exclude, the global excludes
file, exactly as `git status` sees them); a folder that is no repository is asked the same question through a
throw-away git directory with the folder as its work tree (so its .gitignore files and the global excludes count
as git would count them). Only where git is not installed are the .gitignore files read here, with pathspec's
gitwildmatch. `.git/` is never sent.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from devenv.errors import DevenvError

# git's own environment would point the question at another repository or index
_GIT_VARS = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_COMMON_DIR",
             "GIT_NAMESPACE", "GIT_CEILING_DIRECTORIES", "GIT_DISCOVERY_ACROSS_FILESYSTEM")


@dataclass(frozen=True)
class Selection:
    """The files of a project that are sent, and what is left here."""

    sent: frozenset[str]         # paths relative to the project (a nested repository or submodule as "dir/")
    skipped: tuple[str, ...]     # ignored paths relative to the project, a folder as "dir/" (its files with it)
    by: str                      # how it was decided: "git" | "git (no repository)" | ".gitignore files"


def select(root: Path) -> Selection:
    """The project's files as git sees them (see the module doc)."""
    git = shutil.which("git")
    if git is None:
        return _by_pathspec(root)
    if _in_work_tree(git, root):
        return _ask_git([git], root, "git")
    scratch = tempfile.mkdtemp(prefix="devenv-gitignore-")
    try:
        _git([git, "init", "-q", scratch], root)
        return _ask_git([git, f"--git-dir={scratch}/.git", f"--work-tree={root}"], root, "git (no repository)")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _ask_git(git: list[str], root: Path, by: str) -> Selection:
    listed = _git([*git, "ls-files", "-z", "--cached", "--others", "--exclude-standard"], root)
    ignored = _git([*git, "ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory"], root)
    names = {p.rstrip("/") for p in listed.split("\0") if p and not _under_git(p)}
    sent = {f"{p}/" if (root / p).is_dir() and not (root / p).is_symlink() else p
            for p in names if os.path.lexists(root / p)}  # a tracked file deleted here is not there to send
    skipped = sorted(p for p in ignored.split("\0") if p and not _under_git(p))
    return Selection(frozenset(sent), (".git/", *skipped) if (root / ".git").exists() else tuple(skipped), by)


def _in_work_tree(git: str, root: Path) -> bool:
    try:
        return _git([git, "rev-parse", "--is-inside-work-tree"], root).strip() == "true"
    except DevenvError:
        return False  # no repository here (or one git will not read, e.g. of another owner): the folder's rules


def _git(argv: list[str], cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k not in _GIT_VARS}
    try:
        done = subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as e:
        raise DevenvError(f"git could not list the project's files: {e}", "check `git status` in the folder") from e
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip().splitlines()
        raise DevenvError(f"git could not list the project's files: {why[-1] if why else done.returncode}",
                          "check `git status` in the folder")
    return done.stdout.decode(errors="surrogateescape")


def _under_git(path: str) -> bool:
    return ".git" in Path(path).parts


def _by_pathspec(root: Path) -> Selection:
    """Without git: every .gitignore from the project down (a deeper file decides first, the last matching line
    of a file wins, an ignored folder is not entered), then the global excludes file."""
    import pathspec

    def spec_of(path: Path) -> pathspec.GitIgnoreSpec | None:
        try:
            return pathspec.GitIgnoreSpec.from_lines(path.read_text(errors="replace").splitlines())
        except OSError:
            return None

    global_spec = spec_of(_global_excludes())
    sent: set[str] = set()
    skipped: list[str] = []
    levels: dict[str, pathspec.GitIgnoreSpec | None] = {}

    def ignored(rel: str, is_dir: bool) -> bool:
        probe = rel + "/" if is_dir else rel
        parent = os.path.dirname(rel)
        while True:
            spec = levels.get(parent)
            if spec is not None:
                decided = spec.check_file(probe[len(parent) + 1:] if parent else probe).include
                if decided is not None:
                    return decided
            if not parent:
                break
            parent = os.path.dirname(parent)
        return bool(global_spec and global_spec.check_file(probe).include)

    for dirpath, dirnames, filenames in os.walk(root):
        base = os.path.relpath(dirpath, root)
        base = "" if base == "." else base
        levels[base] = spec_of(Path(dirpath) / ".gitignore")
        kept = []
        for name in sorted(dirnames):
            rel = f"{base}/{name}" if base else name
            if name == ".git" or ignored(rel, True):
                skipped.append(rel + "/")
            else:
                kept.append(name)
        dirnames[:] = kept
        for name in filenames:
            rel = f"{base}/{name}" if base else name
            (skipped.append(rel) if ignored(rel, False) else sent.add(rel))
    return Selection(frozenset(sent), tuple(sorted(skipped)), ".gitignore files")


def _global_excludes() -> Path:
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "git" / "ignore"


def exclude_rules(selection: Selection) -> bytes:
    """rsync filter rules, one a line, that leave out exactly what git skips: each path anchored at the project's
    root, its wildcard characters escaped, so a name never becomes a pattern. (Lines, not NULs: rsync's --from0
    would also change how it reads the .gitignore files it protects with; a line break in a name becomes `?`.)"""
    rules = ["- .git/"]
    for path in selection.skipped:
        rules.append(f"- /{_literal(path)}")
    return "\n".join(rules).encode(errors="surrogateescape") + b"\n"


def _literal(path: str) -> str:
    if not any(c in path for c in "*?[\n\r"):
        return path  # rsync matches a pattern without wildcards literally (a backslash included)
    return "".join("?" if c in "\n\r" else "\\" + c if c in "*?[\\" else c for c in path)


def files_of(root: Path, selection: Selection) -> Iterator[Path]:
    """Every file sent (a nested repository's files too, its .git left out)."""
    for rel in selection.sent:
        path = root / rel
        if rel.endswith("/"):
            for dirpath, dirnames, filenames in os.walk(path):
                dirnames[:] = [d for d in dirnames if d != ".git"]
                yield from (Path(dirpath) / f for f in filenames)
        else:
            yield path
