"""The monitor's runs view (key r): the selected host's detached runs (`devenv runs`: id, name, state, duration,
command) with the highlighted run's last lines, and a log view that follows one run (`devenv logs --run -f`:
byte-offset reads until the run ends). Everything comes from MonitorServices' runs callables, called in thread
workers: a slow or dead host never blocks the screen."""

from __future__ import annotations

import codecs
import time
from collections.abc import Callable, Iterator

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Label, RichLog, Static
from textual.worker import get_current_worker

from devenv.env.runs import Run, format_duration
from devenv.errors import DevenvError
from devenv.services.runs import LogPiece

REFRESH_S = 5.0         # the list is asked again this often while the view is open
TAIL_LINES = 12         # the highlighted run's last lines shown under the list
STATE_STYLE = {"running": "green", "starting": "yellow", "killed": "red", "lost": "red"}


def state_text(run: Run) -> Text:
    style = STATE_STYLE.get(run.phase, "bold red" if run.exit_code not in (0, None) else "")
    return Text(run.state, style)


def last_lines(data: bytes, n: int = TAIL_LINES) -> str:
    """The last n lines of a log's tail, as text (bytes that are no UTF-8 shown as such, never an error)."""
    lines = data.decode("utf-8", "replace").replace("\r\n", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines[-n:])


class LineSplitter:
    """Bytes as they come -> whole lines of text (UTF-8 decoded incrementally: a character cut between two reads
    is kept for the next); flush() gives a last line without its end."""

    def __init__(self) -> None:
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.rest = ""

    def feed(self, data: bytes) -> list[str]:
        text = self.rest + self.decoder.decode(data)
        *lines, self.rest = text.replace("\r\n", "\n").split("\n")
        return lines

    def flush(self) -> list[str]:
        text, self.rest = self.rest + self.decoder.decode(b"", final=True), ""
        return [text] if text else []


class RunsScreen(Screen[None]):
    """The runs of one host's environment; enter follows the highlighted run's log."""

    DEFAULT_CSS = """
    RunsScreen #runs-title { padding: 0 1; color: $accent; text-style: bold; }
    RunsScreen #runs-table { height: 1fr; border: round $panel-lighten-2; }
    RunsScreen #runs-tail { height: auto; max-height: 16; border: round $panel-lighten-2; padding: 0 1; }
    RunsScreen #runs-note { padding: 0 1; color: $text-muted; }
    """
    BINDINGS = [
        Binding("enter,f", "follow", "Follow log"),
        Binding("r", "refresh", "Refresh"),
        Binding("escape,q", "close", "Back"),
    ]

    def __init__(self, host: str, env: str | None, list_runs: Callable[[str], list[Run]],
                 run_tail: Callable[[str, str], LogPiece] | None,
                 follow_run: Callable[[str, str, int], Iterator[LogPiece]] | None,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__()
        self.host, self.env = host, env
        self.list_runs, self.run_tail, self.follow_run = list_runs, run_tail, follow_run
        self.clock = clock
        self.runs: list[Run] = []
        self.loaded = False          # the first answer came (a list, maybe empty, or an error)
        self.tails: dict[str, str] = {}

    def compose(self) -> ComposeResult:
        env = f" (env {self.env})" if self.env else ""
        yield Label(f"Runs on {self.host}{env}", id="runs-title")
        table: DataTable[str | Text] = DataTable(id="runs-table", cursor_type="row", zebra_stripes=True)
        table.add_columns("id", "name", "state", "started", "duration", "command")
        yield table
        tail = Static("", id="runs-tail")
        tail.border_title = "last lines"
        yield tail
        yield Label("asking the host…", id="runs-note")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#runs-table", DataTable).focus()
        self.action_refresh()
        self.set_interval(REFRESH_S, self.action_refresh)

    # --- the list --------------------------------------------------------------------------------------------

    def action_refresh(self) -> None:
        self._load()

    @work(thread=True, exclusive=True, group="runs-list")
    def _load(self) -> None:
        try:
            runs = self.list_runs(self.host)
        except DevenvError as e:
            self.app.call_from_thread(self._failed, e.message + (f" ({e.hint})" if e.hint else ""))
            return
        if not get_current_worker().is_cancelled:
            self.app.call_from_thread(self._show, runs)

    def _failed(self, text: str) -> None:
        self.loaded = True
        self.query_one("#runs-note", Label).update(Text(text, "red"))

    def _show(self, runs: list[Run]) -> None:
        self.loaded = True
        self.runs = list(reversed(runs))          # newest first
        table = self.query_one("#runs-table", DataTable)
        keep = self.highlighted()
        table.clear()
        now = self.clock()
        for run in self.runs:
            started = time.strftime("%m-%d %H:%M:%S", time.localtime(run.started)) if run.started else "-"
            table.add_row(run.id, run.name or "", state_text(run), started,
                          format_duration(run.duration(now)), Text(run.command), key=run.id)
        if keep is not None and any(r.id == keep.id for r in self.runs):
            table.move_cursor(row=table.get_row_index(keep.id))
        running = sum(1 for r in self.runs if not r.finished)
        note = (f"{len(self.runs)} runs, {running} not ended · enter follows a run's log, r asks again"
                if self.runs else f"no runs yet: `devenv run {self.host} -- CMD` starts one")
        self.query_one("#runs-note", Label).update(note)
        self._tail_of(self.highlighted())

    def highlighted(self) -> Run | None:
        table = self.query_one("#runs-table", DataTable)
        if not self.runs or table.cursor_row is None or not 0 <= table.cursor_row < len(self.runs):
            return None
        return self.runs[table.cursor_row]

    @on(DataTable.RowSelected)
    def _selected(self, event: DataTable.RowSelected) -> None:   # enter on the table (it takes the key itself)
        self.action_follow()

    @on(DataTable.RowHighlighted)
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._tail_of(self.highlighted())

    # --- the highlighted run's last lines ---------------------------------------------------------------------

    def _tail_of(self, run: Run | None) -> None:
        tail = self.query_one("#runs-tail", Static)
        if run is None:
            tail.update("")
            return
        tail.border_title = f"last lines of {run.name or run.id}"
        if run.id in self.tails:
            tail.update(Text(self.tails[run.id]))
        if self.run_tail is not None:
            self._read_tail(run.id)

    @work(thread=True, exclusive=True, group="runs-tail")
    def _read_tail(self, run_id: str) -> None:
        assert self.run_tail is not None
        try:
            text = last_lines(self.run_tail(self.host, run_id).data) or "(no output yet)"
        except DevenvError as e:
            text = f"the log could not be read: {e.message}"
        if not get_current_worker().is_cancelled:
            self.app.call_from_thread(self._tail_read, run_id, text)

    def _tail_read(self, run_id: str, text: str) -> None:
        self.tails[run_id] = text
        run = self.highlighted()
        if run is not None and run.id == run_id:
            self.query_one("#runs-tail", Static).update(Text(text))

    # --- keys ------------------------------------------------------------------------------------------------

    def action_follow(self) -> None:
        run = self.highlighted()
        if run is None:
            self.app.notify("no run selected", severity="warning")
            return
        if self.follow_run is None:
            self.app.notify("following a run's log is not available yet in this build", severity="warning")
            return
        self.app.push_screen(RunLogScreen(self.host, run, self.follow_run))

    def action_close(self) -> None:
        self.dismiss(None)


class RunLogScreen(Screen[None]):
    """One run's log from its start, followed as it grows (byte offsets, as `logs --run -f`) until it ends."""

    DEFAULT_CSS = """
    RunLogScreen #run-title { padding: 0 1; color: $accent; text-style: bold; }
    RunLogScreen #run-log { height: 1fr; border: round $panel-lighten-2; padding: 0 1; }
    RunLogScreen #run-state { padding: 0 1; }
    """
    BINDINGS = [Binding("escape,q", "close", "Back")]

    def __init__(self, host: str, run: Run, follow_run: Callable[[str, str, int], Iterator[LogPiece]]) -> None:
        super().__init__()
        self.host, self.run, self.follow_run = host, run, follow_run
        self.received = 0                 # bytes of the log shown so far (the offset the next read starts at)
        self.ended: LogPiece | None = None
        self.splitter = LineSplitter()

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(f"Run {self.run.id}" + (f" ({self.run.name})" if self.run.name else "") +
                        f" on {self.host}: {self.run.command}", id="run-title")
            log = RichLog(id="run-log", max_lines=5000, wrap=False)
            log.border_title = "log"
            yield log
            yield Label("following…", id="run-state")
        yield Footer()

    def on_mount(self) -> None:
        self._follow()

    @work(thread=True, exclusive=True, group="run-log")
    def _follow(self) -> None:
        worker = get_current_worker()
        pieces = self.follow_run(self.host, self.run.id, 0)
        try:
            for piece in pieces:
                if worker.is_cancelled:
                    return
                self.app.call_from_thread(self._piece, piece)
        except DevenvError as e:
            if not worker.is_cancelled:
                self.app.call_from_thread(self._lost, e.message + (f" ({e.hint})" if e.hint else ""))
        finally:
            close = getattr(pieces, "close", None)
            if close is not None:
                close()    # the follow's session goes with it

    def _piece(self, piece: LogPiece) -> None:
        log = self.query_one("#run-log", RichLog)
        self.received += len(piece.data)
        lines = self.splitter.feed(piece.data)
        if piece.over and self.received >= piece.size:
            lines += self.splitter.flush()
            self.ended = piece
        for line in lines:
            log.write(Text(line))
        state = self.query_one("#run-state", Label)
        if self.ended is not None:
            word = f"exited {piece.exit_code}" if piece.state == "exited" else piece.state
            style = "green" if word == "exited 0" else "red"
            state.update(Text(f"the run ended: {word} · {self.received} bytes · escape goes back", style))
        else:
            state.update(f"{piece.state} · {self.received} bytes so far · following (escape goes back; "
                         "the run goes on)")

    def _lost(self, text: str) -> None:
        self.query_one("#run-state", Label).update(Text(f"following stopped: {text} (the run goes on)", "red"))

    def action_close(self) -> None:
        self.workers.cancel_group(self, "run-log")
        self.dismiss(None)
