"""rsync over an ssh entry: the project to the environment's workspace and outputs back (L1: runs rsync here).

The remote shell is the user's own OpenSSH with the entry devenv wrote (`ssh -F devenv's config ALIAS`), so
sync goes exactly where `devenv ssh` goes. Every path devenv hands rsync is absolute (local) or behind
`ALIAS:` (remote), so no value can become an rsync option.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from devenv.errors import BadInputError, ConnectError, DevenvError
from devenv.remote import gitignore
from devenv.remote.gitignore import Selection

# What git ignores here is left out by rules made from git's own answer (remote/gitignore.py), given in a file;
# with --delete, files there that a .gitignore pattern names are protected (receiver side only): outputs made
# there are never deleted because they do not exist here.
RECEIVER_PROTECT = "--filter=:r- .gitignore"


@dataclass(frozen=True)
class Target:
    """Where the environment's files are: `destination:workspace` through ssh_argv, or a local folder."""

    ssh_argv: tuple[str, ...]      # e.g. ("ssh", "-F", "/…/devenv/ssh/config"); empty when local
    destination: str | None        # an ssh destination (devenv's alias), None when the workspace is here
    workspace: str                 # the workspace folder there

    def remote(self, subdir: str) -> str:
        path = str(PurePosixPath(self.workspace) / subdir) if subdir else self.workspace
        return f"{self.destination}:{path}" if self.destination else path


def check_subdir(value: str, what: str) -> str:
    """A folder inside the workspace: relative, no `..`, no option-looking or odd names."""
    path = PurePosixPath(value)
    if (not value or path.is_absolute() or ".." in path.parts or value.startswith("-")
            or any(c in value for c in "\n\r\0:")):
        raise BadInputError(f"{what} '{value}' is not a folder inside the workspace",
                         "give a relative path without '..', e.g. outputs or runs/exp1")
    return str(path)


def push_argv(local_dir: Path, target: Target, subdir: str, delete: bool, rsync: str = "rsync",
              rules: Path | None = None) -> list[str]:
    """rsync argv sending local_dir's contents into workspace/subdir, leaving out what the rules file (exclude
    rules, gitignore.exclude_rules) names."""
    argv = _base(target, rsync)
    if rules is not None:
        argv += [f"--exclude-from={rules}"]
    if delete:
        argv += ["--delete", RECEIVER_PROTECT]  # files gone here go there too; gitignored ones there are kept
    return argv + ["--", f"{local_dir.resolve()}/", target.remote(subdir) + "/"]


def push(local_dir: Path, target: Target, subdir: str, delete: bool, rsync: str = "rsync") -> Selection:
    """Send the project as git sees it (tracked + untracked not ignored; never .git/); returns what was chosen."""
    import tempfile

    selection = gitignore.select(local_dir)
    fd, name = tempfile.mkstemp(prefix="devenv-sync-", suffix=".rules")  # 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(gitignore.exclude_rules(selection))
        run(push_argv(local_dir, target, subdir, delete, rsync, Path(name)))
    finally:
        os.unlink(name)
    return selection


def pull_argv(target: Target, subdir: str, local_dir: Path, rsync: str = "rsync") -> list[str]:
    """rsync argv bringing workspace/subdir back into local_dir (no gitignore filter: outputs usually are)."""
    return _base(target, rsync) + ["--", target.remote(subdir) + "/", f"{local_dir.resolve()}/"]


def pull(target: Target, subdir: str, into: Path, rsync: str = "rsync") -> None:
    """Bring workspace/subdir back into `into`. A path that is not there is one error (bad input), and leaves no
    empty folder here (the ones made for it are taken away again)."""
    made = [p for p in (into, *into.parents) if not p.exists()]  # deepest first
    try:
        if not _has_mkpath(rsync):
            into.mkdir(parents=True, exist_ok=True)
        run(pull_argv(target, subdir, into, rsync))
    except DevenvError as e:
        for folder in made:
            try:
                folder.rmdir()  # only an empty one: nothing that arrived is lost
            except OSError:
                break
        if "No such file or directory" in e.message and ("change_dir" in e.message or "link_stat" in e.message):
            raise BadInputError(f"{target.remote(subdir)} does not exist in the environment",
                                "name a path inside the synced folder (`devenv exec HOST -- ls` lists it)") from None
        raise


def _base(target: Target, rsync: str) -> list[str]:
    argv = [rsync, "-rlptz"] + (["--mkpath"] if _has_mkpath(rsync) else [])
    if target.destination:
        argv += ["-e", " ".join(shlex.quote(a) for a in target.ssh_argv)]
    return argv


_MKPATH: dict[str, bool] = {}


def _has_mkpath(rsync: str) -> bool:
    """rsync >= 3.2.3 makes missing destination folders (--mkpath); older ones are asked for -r only."""
    if rsync not in _MKPATH:
        try:
            out = subprocess.run([rsync, "--version"], capture_output=True, text=True, timeout=10).stdout
            version = out.split("version", 1)[1].split()[0]
            _MKPATH[rsync] = tuple(int(p) for p in version.split(".")[:3]) >= (3, 2, 3)
        except (OSError, IndexError, ValueError, subprocess.SubprocessError):
            _MKPATH[rsync] = False
    return _MKPATH[rsync]


def rsync_binary() -> str:
    found = shutil.which("rsync")
    if not found:
        raise DevenvError("rsync is not installed on this machine",
                          "install it (apt install rsync, brew install rsync); the environment's image has it")
    return found


def run(argv: list[str]) -> None:
    """Run rsync; a failure is one message with rsync's own last lines and what usually causes it."""
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if done.returncode != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:]) or f"exit code {done.returncode}"
        hint = ("is the environment running with sshd? (devenv status HOST); an image without rsync needs "
                "`devenv up HOST --yes` after `devenv image build`")
        if done.returncode == 255 or "connection" in done.stderr.lower():
            raise ConnectError(f"rsync could not reach the environment: {tail}", hint)
        raise DevenvError(f"rsync failed: {tail}", hint)


def tree_state(root: Path, selection: Selection) -> dict[str, tuple[int, int]]:
    """{relative path: (mtime_ns, size)} of every file the selection sends: two states differ when something that
    is sent changed (an ignored file, or git's own churn under .git, is no change)."""
    state: dict[str, tuple[int, int]] = {}
    for path in gitignore.files_of(root, selection):
        try:
            st = path.lstat()
        except OSError:
            continue
        state[str(path.relative_to(root))] = (st.st_mtime_ns, st.st_size)
    return state
