"""Copy an image from one host's engine to others' without a registry (L2): `save` on the source streamed through
this machine into `load` on each destination (never whole in memory or on disk here), docker or podman at either
end. The stream runs over the user's OpenSSH, spliced between the two clients' pipes (remote.ssh_pipe); with
DEVENV_PIPE=paramiko, a local host, or an ssh that cannot log in, chunk by chunk between two channels of devenv's
own connections (remote.pipe).

A cut stream leaves nothing: the destination's `load` is killed before it sees the end of its input (its
engine keeps nothing of an archive it did not read to the end), so only a whole archive is ever loaded; the id
on the destination is then checked against the source's. Destinations run in parallel, `parallel` at a time;
Ctrl-C (or any error here) aborts every stream, both ends.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from devenv.env import engines
from devenv.env.image_push import FAILED, PUSHED, SKIPPED, HostImage, PushResult, needs_push, parse_inspect
from devenv.errors import BadInput, DevenvError
from devenv.remote import openssh
from devenv.remote.base import CommandPipe, Connection, Result
from devenv.remote.ssh_pipe import NoStart, OpenSSHPipe, client_argv, splice_step

if TYPE_CHECKING:
    from devenv.services.session import EnvSession

CHUNK = 1 << 20
INSPECT_TIMEOUT_S = 60
SAVE_END_TIMEOUT_S = 60          # after the last byte, for `save` to exit
LOAD_END_TIMEOUT_S = 1800        # after the last byte, for `load` to unpack and register the image
PROGRESS_EVERY_S = 1.0
START_TIMEOUT_S = 60             # for the user's ssh to log in and start the command


class Piped(Protocol):
    def open_pipe(self, command: str) -> CommandPipe: ...


@dataclass(frozen=True)
class EngineHost:
    """A host's engine as the push sees it: its connection, its engine (docker | podman | auto), the image name."""

    name: str
    conn: Connection
    engine: str
    image: str
    ssh_argv: tuple[str, ...] | None = None   # the user's ssh to the host (remote.ssh_pipe); None: not used


class PushFailed(DevenvError):
    """A stream that broke, a save or load the engine refused, or an id that did not match."""


ProgressFn = Callable[[str, int, float, int | None], None]   # host, bytes so far, seconds so far, image size


def inspect(host: EngineHost, image: str | None = None) -> HostImage:
    """The host's image of that name (or id): HostImage with image_id None when it has none."""
    result = host.conn.run(engines.image_id_command(host.engine, image or host.image), timeout=INSPECT_TIMEOUT_S)
    if result.ok:
        return parse_inspect(host.name, result.stdout)
    if engines.is_no_such_image(result.stderr):
        return HostImage(host.name, None)
    raise PushFailed(f"{host.name}: cannot ask the engine about {image or host.image}: "
                     f"{(result.stderr or result.stdout).strip()[-300:] or f'exit code {result.exit_code}'}",
                     "check that docker or podman runs there and that this user may use it (devenv check HOST)")


def push(source: EngineHost, dests: list[EngineHost], *, parallel: int = 4,
         on_progress: ProgressFn | None = None, on_note: Callable[[str], None] | None = None) -> list[PushResult]:
    """The source's image onto every destination that lacks it (same id: skipped); one PushResult per host,
    in the order given. Raises PushFailed only when the source has no such image. Over OpenSSH, the first
    destinations' two clients log in (gated: nothing runs yet) while the ids are asked."""
    prestarted = {dest.name: pair for dest in dests[:max(1, parallel)] if (pair := _early(source, dest))}
    try:
        src = inspect(source)
    except BaseException:
        for pair in prestarted.values():
            _dismiss(pair)
        raise
    if src.image_id is None:
        raise PushFailed(f"{source.name} has no image {source.image}",
                         f"build it there first (devenv image build {source.name}) or push from a host that has it")
    if on_note:
        on_note(f"{source.name} has {source.image} ({src.image_id[:12]}"
                + (f", {src.size_bytes / 1e9:.2f} GB" if src.size_bytes else "") + ")")
    cancel = threading.Event()

    def one(dest: EngineHost) -> PushResult:
        early = prestarted.pop(dest.name, None) or _early(source, dest)
        try:
            have = inspect(dest, src.image_id)
            if not needs_push(src, have):
                _dismiss(early)
                return PushResult(dest.name, SKIPPED, image_id=_name_it(dest, src.image_id or "").image_id)
            stream, early = early, None
            return copy(source, dest, src, cancel, on_progress, early=stream)
        except DevenvError as e:
            return PushResult(dest.name, FAILED, error=e.message, hint=e.hint, exit_code=e.exit_code)
        finally:
            _dismiss(early)

    try:
        with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(dests))),
                                thread_name_prefix="devenv-push") as pool:
            futures = [pool.submit(one, dest) for dest in dests]
            try:
                return [f.result() for f in futures]
            except BaseException:
                cancel.set()  # Ctrl-C: every stream aborts at its next chunk, both ends killed on their hosts
                raise
    finally:
        for pair in list(prestarted.values()):
            _dismiss(pair)


def copy(source: EngineHost, dest: EngineHost, src: HostImage, cancel: threading.Event | None = None,
         on_progress: ProgressFn | None = None, *, early: _Pair | None = None) -> PushResult:
    """One stream: source's save -> dest's load, then the id checked on dest (and the name tagged there).
    early: the two gated OpenSSH clients already logging in (push's), else they are started here."""
    cancel = cancel or threading.Event()
    saver, loader, step = _open_stream(source, dest, early)
    moved, started, shown = 0, time.monotonic(), 0.0
    try:
        while not cancel.is_set():
            try:
                n = step()
            except BrokenPipeError:
                saver.abort()
                end = loader.finish(SAVE_END_TIMEOUT_S)
                return _failed(dest, moved, started, f"{dest.name}'s load stopped reading: {_tail(end.stderr)}",
                               "see that the engine runs and the disk has room (devenv check " + dest.name + ")")
            if n == 0:
                break
            if n < 0:
                continue   # nothing within half a second: look at the cancel again
            moved += n
            now = time.monotonic()
            if on_progress and now - shown >= PROGRESS_EVERY_S:
                shown = now
                on_progress(dest.name, moved, now - started, src.size_bytes)
    except BaseException:
        saver.abort()
        loader.abort()
        raise
    if cancel.is_set():
        saver.abort()
        loader.abort()
        return _failed(dest, moved, started, "interrupted: the stream was stopped", "run the push again")
    saved = saver.finish(SAVE_END_TIMEOUT_S)
    if not saved.ok:
        loader.abort()  # before load sees a clean end of its input: a cut archive is never loaded
        why = _tail(saved.stderr) or ("killed or the connection was lost" if saved.exit_code < 0
                                      else f"exit code {saved.exit_code}")
        return _failed(dest, moved, started, f"the stream from {source.name} broke after "
                       f"{moved} bytes ({source.name}'s save: {why}); nothing was loaded on {dest.name}",
                       f"run the push again; check {source.name} with `devenv check {source.name}`")
    loaded = loader.finish(LOAD_END_TIMEOUT_S)
    seconds = time.monotonic() - started
    if on_progress:
        on_progress(dest.name, moved, seconds, src.size_bytes)
    if not loaded.ok:
        return _failed(dest, moved, started, f"{dest.name}'s load failed: {_tail(loaded.stderr) or loaded.exit_code}",
                       f"see that the engine runs and the disk has room (devenv check {dest.name})")
    there = _name_it(dest, src.image_id or "")
    if not there.same_as(src):
        return _failed(dest, moved, started, f"{dest.name} loaded the stream, but {dest.image} there is "
                       f"{(there.image_id or 'missing')[:12]}, not {(src.image_id or '')[:12]}",
                       "run the push again; if it repeats, the engines disagree on the archive: report it")
    return PushResult(dest.name, PUSHED, image_id=there.image_id, bytes_moved=moved, seconds=seconds)


class _End(Protocol):
    def finish(self, timeout: float) -> Result: ...

    def abort(self) -> None: ...


_Pair = tuple[OpenSSHPipe, OpenSSHPipe]


def _early(source: EngineHost, dest: EngineHost) -> _Pair | None:
    """The save's and the load's ssh clients, started gated (they log in; nothing runs until go): None where
    either host has no ssh for streams."""
    if not (source.ssh_argv and dest.ssh_argv):
        return None
    saver = OpenSSHPipe(list(source.ssh_argv), engines.save_command(source.engine, source.image),
                        _stopper(source.conn), writes=False, gated=True)
    try:
        loader = OpenSSHPipe(list(dest.ssh_argv), engines.load_command(dest.engine), _stopper(dest.conn),
                             writes=True, gated=True)
    except BaseException:
        saver.dismiss()
        raise
    return saver, loader


def _dismiss(pair: _Pair | None) -> None:
    if pair is not None:
        for end in pair:
            end.dismiss()


def _open_stream(source: EngineHost, dest: EngineHost,
                 early: _Pair | None = None) -> tuple[_End, _End, Callable[[], int]]:
    """(save, load, step): each step moves one chunk and says how many bytes (0: the end, -1: none yet);
    BrokenPipeError when the load stopped reading. Over the user's OpenSSH where both hosts have it (the bytes
    spliced between the two clients' pipes, never copied into Python), else over devenv's own connections."""
    pair = early or _early(source, dest)
    if pair is not None:
        saver, loader = pair
        try:
            saver.started(START_TIMEOUT_S)
            loader.started(START_TIMEOUT_S)
        except NoStart:
            _dismiss(pair)   # the user's ssh cannot log in where devenv can (a key only devenv is given): devenv's way
        except BaseException:
            saver.abort()
            loader.abort()
            raise
        else:
            saver.go(then_close=True)
            loader.go(then_close=False)
            src_fd, dst_fd = saver.stdout_fd, loader.stdin_fd
            return saver, loader, lambda: splice_step(src_fd, dst_fd)
    saver_p = _pipe(source.conn).open_pipe(engines.save_command(source.engine, source.image))
    try:
        loader_p = _pipe(dest.conn).open_pipe(engines.load_command(dest.engine))
    except BaseException:
        saver_p.abort()
        raise

    def step() -> int:
        chunk = saver_p.read(CHUNK)
        if chunk:
            try:
                loader_p.write(chunk)
            except OSError as e:
                raise BrokenPipeError(str(e)) from None
        return len(chunk)

    return saver_p, loader_p, step


def _stopper(conn: Connection) -> Callable[[str], object]:
    return lambda script: conn.run(script, timeout=15)


def _name_it(dest: EngineHost, image_id: str) -> HostImage:
    """The image under the environment's name on dest (tagged there when the load named it otherwise), and what
    that name is now: one round trip."""
    result = dest.conn.run(engines.name_image_command(dest.engine, image_id, dest.image), timeout=INSPECT_TIMEOUT_S)
    if not result.ok:
        raise PushFailed(f"{dest.name}: cannot name image {image_id[:12]} {dest.image}: {_tail(result.stderr)}",
                         "check that the engine runs there")
    return parse_inspect(dest.name, result.stdout)


def _pipe(conn: Connection) -> Piped:
    if not hasattr(conn, "open_pipe"):
        raise PushFailed(f"{conn.name}: this connection cannot stream", "push between SSH or local hosts")
    return conn  # type: ignore[return-value]  # an SSHConnection or LocalConnection (remote.pipe)


def _failed(dest: EngineHost, moved: int, started: float, error: str, hint: str, code: int = 1) -> PushResult:
    return PushResult(dest.name, FAILED, bytes_moved=moved, seconds=time.monotonic() - started, error=error,
                      hint=hint, exit_code=code)


def _tail(text: str) -> str:
    return " ".join(text.strip().splitlines()[-3:])[-300:]


def engine_host(session: EnvSession, image: str) -> EngineHost:
    """The engine side of a session's host, for `image`; an error when its environments run from no image."""
    if not session.kind.builds_images:
        raise PushFailed(f"{session.profile.name}'s environments are {session.traits.environment}, run from no "
                         "image: there is nothing to push there",
                         "name hosts whose environments are containers (runtime docker, or auto with docker/podman)")
    return EngineHost(session.profile.name, session.conn, session.host.engine, image, _ssh_argv(session))


PIPES = ("openssh", "paramiko")


def _ssh_argv(session: EnvSession) -> tuple[str, ...] | None:
    """The user's ssh to the session's host for the stream, unless DEVENV_PIPE=paramiko or the host is local."""
    way = os.environ.get("DEVENV_PIPE", "openssh")
    if way not in PIPES:
        raise BadInput(f"DEVENV_PIPE={way[:40]!r} is not a way to stream images",
                       f"set it to one of {', '.join(PIPES)} (default openssh), or unset it")
    if way == "paramiko" or session.host.ssh is None:
        return None
    argv = client_argv(openssh.host_options(session.host), session.conn)
    return tuple(argv) if argv else None
