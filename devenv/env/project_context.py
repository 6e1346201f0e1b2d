"""A project's own build context (devcontainer.json's build): the files of the folder it names, never more.

The project folder is the explicit directory the user named (--devcontainer PATH, or the current folder);
build.context and build.dockerfile are paths inside it (devcontainer.parse refuses `..` and absolute paths),
and here their real paths must stay inside it too (a link to ~/.ssh is refused). In the context, a link is
sent as a link, never followed (as `docker build` does): no file outside the folder travels. .dockerignore is
honoured (its common forms: globs, `**`, `!` exceptions; the last matching line wins), FIFOs, sockets and
devices are skipped. The digest covers every name, mode, link target and byte sent, so a change rebuilds.
"""

from __future__ import annotations

import fnmatch
import hashlib
import io
import os
import stat
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from devenv.config.profiles import ProjectBuild
from devenv.errors import ProfileError

DOCKERFILE_NAME = ".devenv-project.Dockerfile"   # the Dockerfile's name inside the context sent


@dataclass(frozen=True)
class ProjectContext:
    root: Path            # the project folder (resolved)
    context: Path         # the context folder, inside root
    dockerfile: Path      # inside root
    files: int
    size_bytes: int
    digest: str


def resolve(project_root: str | Path, context: str, dockerfile: str, source: str = "devcontainer.json"
            ) -> ProjectContext:
    """The context and Dockerfile inside project_root, with the digest of what would be sent."""
    root = Path(project_root).resolve()
    ctx = (root / context).resolve()
    docker_file = (root / dockerfile).resolve()
    for what, path in (("build.context", ctx), ("build.dockerfile", docker_file)):
        if path != root and root not in path.parents:
            raise ProfileError(f"{source}: {what} leads to {path}, outside the project folder {root}",
                               "keep the Dockerfile and the build context inside the project (no links out)")
    if not ctx.is_dir():
        raise ProfileError(f"{source}: build.context {ctx} is not a folder", "fix build.context")
    if not docker_file.is_file():
        raise ProfileError(f"{source}: build.dockerfile {docker_file} is not a file", "fix build.dockerfile")
    h = hashlib.sha256()
    files = size = 0
    for rel, path, st in _entries(ctx):
        h.update(rel.encode() + b"\0" + oct(stat.S_IMODE(st.st_mode) & 0o111).encode() + b"\0")
        if stat.S_ISLNK(st.st_mode):
            h.update(b"L" + os.readlink(path).encode())
        elif stat.S_ISREG(st.st_mode):
            files += 1
            size += st.st_size
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
        h.update(b"\1")
    h.update(b"Dockerfile\0" + docker_file.read_bytes())
    return ProjectContext(root, ctx, docker_file, files, size, h.hexdigest())


def of_build(build: ProjectBuild) -> ProjectContext:
    return resolve(build.project_root, build.context_dir, build.dockerfile)


def make_tar(pc: ProjectContext) -> tuple[tempfile.SpooledTemporaryFile[bytes], str]:
    """(the context as a tar file object at 0, the Dockerfile's name inside it)."""
    out = tempfile.SpooledTemporaryFile(max_size=64 * 1024 * 1024)  # noqa: SIM115 (handed to the caller)
    with tarfile.open(fileobj=out, mode="w") as tar:
        for rel, path, st in _entries(pc.context):
            info = tar.gettarinfo(str(path), arcname=rel)   # lstat: a link stays a link
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            if stat.S_ISREG(st.st_mode):
                with open(path, "rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
        data = pc.dockerfile.read_bytes()
        info = tarfile.TarInfo(DOCKERFILE_NAME)
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))
    out.seek(0)
    return out, DOCKERFILE_NAME


def _entries(ctx: Path) -> Iterator[tuple[str, Path, os.stat_result]]:
    """(relative name, path, lstat) of what the context sends, in a stable order."""
    patterns = _ignore_patterns(ctx)
    for dirpath, dirnames, filenames in os.walk(ctx, followlinks=False):
        base = Path(dirpath)
        dirnames.sort()
        kept = []
        for d in dirnames:
            rel = (base / d).relative_to(ctx).as_posix()
            st = os.lstat(base / d)
            if _ignored(rel, patterns) and not _has_exception_under(rel, patterns):
                continue
            if stat.S_ISLNK(st.st_mode):   # a link to a folder: sent as a link, not walked
                if not _ignored(rel, patterns):
                    yield rel, base / d, st
                continue
            if not _ignored(rel, patterns):
                yield rel, base / d, st
            kept.append(d)
        dirnames[:] = kept
        for name in sorted(filenames):
            path = base / name
            rel = path.relative_to(ctx).as_posix()
            st = os.lstat(path)
            if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)) or _ignored(rel, patterns):
                continue
            yield rel, path, st


def _ignore_patterns(ctx: Path) -> list[tuple[bool, str]]:
    path = ctx / ".dockerignore"
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(errors="replace").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = os.path.normpath(line[1:] if negate else line).lstrip("/")
        out.append((negate, pattern))
    return out


def _matches(rel: str, pattern: str) -> bool:
    if fnmatch.fnmatchcase(rel, pattern) or fnmatch.fnmatchcase(rel, pattern.replace("**/", "")):
        return True
    # a pattern naming a folder excludes what is inside it
    return any(fnmatch.fnmatchcase("/".join(rel.split("/")[:i]), pattern) for i in range(1, rel.count("/") + 1))


def _ignored(rel: str, patterns: list[tuple[bool, str]]) -> bool:
    ignored = False
    for negate, pattern in patterns:
        if _matches(rel, pattern):
            ignored = not negate
    return ignored


def _has_exception_under(rel: str, patterns: list[tuple[bool, str]]) -> bool:
    return any(negate and pattern.startswith(rel + "/") for negate, pattern in patterns)
