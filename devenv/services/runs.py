"""Detached runs of an environment (L2): start, list, read, follow, cancel and prune, through the backend's
RunPlace (where the runs live and how a script reaches them) and devenv.env.runs' scripts, the same on every
backend. The host keeps everything (the run's folder in the workspace); this side only asks."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from devenv.config.profiles import EnvProfile
from devenv.env import runs as model
from devenv.errors import BadInput, DevenvError
from devenv.services.environments.contract import EnvironmentBackend, RunPlace


class NoSuchRun(BadInput):
    """A run id (or name) the environment does not have: exit 2."""


class ScriptFailed(DevenvError):
    """A run script did not come back (they end with exit 0 themselves): the way to the environment failed."""


@dataclass(frozen=True)
class LogPiece:
    """One read of a run's log: the bytes from the offset asked, the run's state when they were read, and the
    log's size then (an ended run's log is complete once offset + len(data) reaches it)."""

    data: bytes
    state: str          # running | starting | exited | killed | lost
    size: int
    exit_code: int | None = None   # once it ended

    @property
    def over(self) -> bool:
        return self.state not in ("running", "starting")


class Runs:
    """The runs of one environment, on its RunPlace."""

    def __init__(self, backend: EnvironmentBackend, env: EnvProfile, host_name: str):
        self.env = env
        self.host_name = host_name
        self.place: RunPlace = backend.run_place(env)

    def _script(self, text: str, args: list[str], what: str) -> str:
        code, out, err = self.place.script(text, args)
        if code != 0:
            raise ScriptFailed(f"{what} failed in '{self.env.name}' on {self.host_name} (exit {code}): "
                              f"{(err or out).strip()[-300:] or 'no output'}",
                              "check that the environment runs: `devenv status " + self.host_name + "`")
        return out

    def start(self, argv: list[str], name: str | None = None, then: str | None = None,
              gpus: str | None = None, following: bool = False) -> str:
        """Start argv detached; returns its id once the supervisor was started."""
        if not argv:
            raise BadInput("no command to run", "give one after --, e.g. devenv run HOST -- python train.py")
        if name is not None:
            model.check_run_name(name)
        then_argv: list[str] = []
        if then is not None:
            if then not in self.place.then:
                raise BadInput(f"--then {then} is not offered for '{self.env.name}' on {self.host_name}",
                               "end the environment yourself when the run is over (`devenv down`), or leave "
                               "--then out")
            then_argv = self.place.then[then]
        run_id = model.new_run_id()
        meta = model.meta_line(run_id, name, argv, self.env.name, gpus, then)
        args = [self.place.runs_dir, run_id, meta, model.SUPERVISOR, "1" if following else "0",
                str(len(self.place.wrap)), *self.place.wrap,
                str(len(then_argv)), *then_argv, "--", *argv]
        code, out, err = self.place.launch(model.LAUNCH, args)
        if code == 0 and not out.strip() and any(r.id == run_id for r in self.list()):
            # the launcher said nothing, yet the run is there: its output was lost on the way (a Docker exec stream
            # that ended before the command's output, seen under load), not the run; the id is ours, so it is known
            return self._started(run_id, then, then_argv)
        if code != 0 or out.strip() != run_id:
            raise DevenvError(f"the run could not be started in '{self.env.name}' on {self.host_name} "
                              f"(exit {code}): {(err or out).strip()[-300:] or 'no output'}",
                              "check the environment (`devenv status`) and its workspace's free space")
        return self._started(run_id, then, then_argv)

    def _started(self, run_id: str, then: str | None, then_argv: list[str]) -> str:
        if then is not None and not then_argv and self.place.watch_end is not None:
            self.place.watch_end(f"{self.place.runs_dir}/{run_id}", then)
        return run_id

    def list(self) -> list[model.Run]:
        return model.parse_listing(self._script(model.LIST, [self.place.runs_dir], "listing the runs"))

    def find(self, ref: str) -> model.Run:
        runs = self.list()
        found = model.find_run(runs, ref)
        if found is None:
            raise NoSuchRun(f"no run '{ref[:40]}' in '{self.env.name}' on {self.host_name}",
                            f"`devenv runs {self.host_name} --env {self.env.name}` lists its runs")
        return found

    def read(self, run_id: str, offset: int, wait_s: float = 0.0, limit: int = model.LOG_CHUNK) -> LogPiece:
        """The log from offset (at most limit bytes), waiting up to wait_s on the host for something new."""
        steps = max(0, int(wait_s / 0.05))
        args = [self.place.runs_dir, run_id, str(int(offset)), str(int(limit)), str(steps)]
        out = self._script(model.READ, args, "reading the run's log")
        if not out:
            # The read script always prints its head line: nothing at all (exit 0) is output lost on the way (a
            # Docker exec stream that ended before the command's output, seen under load). A read changes
            # nothing, so it is asked again; twice nothing is the way failing (follow() then connects again).
            out = self._script(model.READ, args, "reading the run's log")
            if not out:
                raise ScriptFailed(f"reading the run's log in '{self.env.name}' on {self.host_name} came back "
                                   "empty twice", "check that the environment runs: `devenv status "
                                   + self.host_name + "`")
        head, _, body = out.partition("\n")
        state, _, rest = head.partition(" ")
        size, _, code = rest.partition(" ")
        if state == "nosuch":
            raise NoSuchRun(f"no run '{run_id}' in '{self.env.name}' on {self.host_name}",
                            f"`devenv runs {self.host_name} --env {self.env.name}` lists its runs")
        try:
            data = base64.b64decode("".join(body.split()), validate=True)
            total = int(size)
        except ValueError:
            raise DevenvError(f"the run's log came back unreadable: {head[:80]!r}", "run the command again") from None
        return LogPiece(data, state, total, int(code) if code.lstrip("-").isdigit() and code != "-" else None)

    def follow(self, run_id: str, offset: int, write: Callable[[bytes], None], until_end: bool = True,
               reconnect: Callable[[], Runs] | None = None) -> LogPiece:
        """Write the log from offset as it grows until the run ends; returns the last read (its state and exit
        code: read with the log's end, so that an environment that `--then` stops right after is not asked again).
        A lost connection is taken again through reconnect(), at the same offset: nothing lost or repeated."""
        from devenv.errors import ConnectError

        runs = self
        failures = 0
        while True:
            try:
                piece = runs.read(run_id, offset, wait_s=model.FOLLOW_WAIT_S)
                failures = 0
            except (ConnectError, ScriptFailed):   # the connection (or the exec under it) was lost: again
                failures += 1
                if reconnect is None or failures > 5:
                    raise
                time.sleep(min(5.0, 0.5 * failures))   # the host is away: give it a moment, then ask again
                runs = reconnect()
                continue
            if piece.data:
                write(piece.data)
                offset += len(piece.data)
            if piece.over and offset >= piece.size:
                try:   # the end is here: --then may stop the environment now (it waited for this)
                    runs.place.script(model.SEEN, [runs.place.runs_dir, run_id])
                except DevenvError:
                    pass   # the environment is already going (the wait ran out): the end is read all the same
                return piece
            if not until_end and not piece.data:
                return piece

    def tail(self, run_id: str, max_bytes: int = 4096) -> LogPiece:
        """The log's last max_bytes (the run's state and the log's size with them): a look, not a follow."""
        head = self.read(run_id, 0, limit=0)
        return self.read(run_id, max(0, head.size - max_bytes), limit=max_bytes)

    def pieces(self, run_id: str, offset: int = 0) -> Iterator[LogPiece]:
        """The log from offset as it grows, one read at a time (each waits up to FOLLOW_WAIT_S on the host),
        until the run ended and its log is read whole: `logs -f`'s byte-offset reads for a caller that decides
        itself when to stop (the monitor's log view closes the generator)."""
        while True:
            piece = self.read(run_id, offset, wait_s=model.FOLLOW_WAIT_S)
            offset += len(piece.data)
            if piece.over and offset >= piece.size:
                try:   # the end is here (read, before it is shown): as in follow(), --then may go on now
                    self.place.script(model.SEEN, [self.place.runs_dir, run_id])
                except DevenvError:
                    pass
                yield piece
                return
            yield piece

    def cancel(self, run_id: str, grace_s: int = model.CANCEL_GRACE_S) -> tuple[str, bool]:
        """SIGTERM to the run's process group, SIGKILL after grace_s: (its state before, whether KILL was needed)."""
        out = self._script(model.CANCEL, [self.place.runs_dir, run_id, str(int(grace_s))], "cancelling the run")
        lines = out.split()
        if not lines or lines[0] == "nosuch":
            raise NoSuchRun(f"no run '{run_id}' in '{self.env.name}' on {self.host_name}",
                            f"`devenv runs {self.host_name} --env {self.env.name}` lists its runs")
        return lines[0], "killed" in lines[1:]

    def prune(self) -> int:
        out = self._script(model.PRUNE, [self.place.runs_dir], "pruning the runs")
        return int(out.strip() or 0)

    def exit_code(self, run_id: str) -> int | None:
        return self.find(run_id).exit_code
