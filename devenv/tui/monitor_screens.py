"""The monitor's dialogs: help, a yes/no confirmation (up/down/kill), a sanity run's live progress, and the
Jupyter URL (whole, on its own lines, to copy or open)."""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label, ProgressBar, RichLog, Static

from devenv.errors import DevenvError
from devenv.services.monitor_jupyter import JupyterLink


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "close", "Close")]
    KEYS = (
        ("tab / shift+tab", "select the next / previous host"),
        ("j", "Jupyter: open a tunnel and show the URL"),
        ("s", "run the quick sanity suite, with live progress"),
        ("u", "start the environment (asks first)"),
        ("d", "stop the environment (asks first)"),
        ("/", "filter hosts by name (escape clears)"),
        ("up/down, K/J", "select a process of the selected host"),
        ("o", "sort processes: gpu, memory, SM%, cpu, time"),
        ("x / X", "terminate / kill the selected process (asks first)"),
        ("r", "the environment's detached runs; enter follows one's log"),
        ("l", "show / hide the logs pane"),
        ("+ / -", "make the logs pane taller / shorter"),
        ("?", "this help"),
        ("q", "quit"),
    )

    def compose(self) -> ComposeResult:
        text = Text("Keys\n\n", "bold")
        for key, what in self.KEYS:
            text.append(f"{key:>16}", "bold cyan")
            text.append(f"  {what}\n")
        text.append("\nHistories run on a time axis: a '·' is a gap (connection lost or stalled) as wide as it\n"
                    "lasted, never a zero. Values of a host that is down are dimmed, with when it was last seen.",
                    "bright_black")
        with Vertical(id="dialog"):
            yield Static(text)
            yield Label("escape to close", classes="hint")

    def action_close(self) -> None:
        self.dismiss(None)


class ConfirmScreen(ModalScreen[bool]):
    BINDINGS = [Binding("y", "answer(True)", "Yes"), Binding("n,escape", "answer(False)", "No")]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label(Text(self.question), id="question")  # plain text: a command line may hold [brackets]
            with Horizontal(id="buttons"):
                yield Button("Yes (y)", variant="warning", id="yes")
                yield Button("No (n)", variant="primary", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    @on(Button.Pressed)
    def pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class SanityScreen(ModalScreen[None]):
    """Live progress of a sanity run on one host; it keeps running if the screen is closed."""

    BINDINGS = [Binding("escape", "close", "Close")]

    def __init__(self, host: str) -> None:
        super().__init__()
        self.host = host

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label(f"Sanity suite on {self.host}", id="title")
            yield ProgressBar(total=1.0, show_eta=False, id="progress")
            yield RichLog(id="sanity-log", max_lines=200, wrap=True)
            yield Label("running… escape to close (the run goes on)", id="sanity-status", classes="hint")

    def progress(self, text: str, fraction: float | None) -> None:
        self.query_one(RichLog).write(text)
        if fraction is not None:
            self.query_one(ProgressBar).update(progress=fraction)

    def finished(self, ok: bool, text: str) -> None:
        self.query_one(ProgressBar).update(progress=1.0)
        status = self.query_one("#sanity-status", Label)
        status.update(Text(f"{text} — escape to close", "green" if ok else "red"))

    def action_close(self) -> None:
        self.dismiss(None)


class JupyterScreen(ModalScreen[None]):
    """The checked Jupyter URL of one host, whole (it folds, never truncates), with copy and open keys. The
    tunnel stays open after this closes, until the monitor quits."""

    BINDINGS = [Binding("c", "copy", "Copy URL"), Binding("o", "open", "Open in browser"),
                Binding("escape,q", "close", "Close")]

    def __init__(self, link: JupyterLink, browser: Callable[[str], str] | None = None) -> None:
        super().__init__()
        self.link, self.browser = link, browser

    def compose(self) -> ComposeResult:
        link = self.link
        via = {"openssh": "an OpenSSH tunnel", "paramiko": "devenv's SSH connection",
               "local": "this machine (no tunnel)"}.get(link.via, link.via)
        version = f"Jupyter {link.jupyter_version}" if link.jupyter_version else "Jupyter"
        with Vertical(id="dialog"):
            yield Label(f"Jupyter on {link.host} · env {link.env}", id="title")
            yield Static(Text(link.url, "bold cyan", overflow="fold"), id="jupyter-url")
            yield Label(f"{version} answered on 127.0.0.1:{link.local_port} through {via}"
                        + (" (already open)" if link.reused else "")
                        + ("; the tunnel stays open until you quit the monitor" if link.via != "local" else ""),
                        id="jupyter-how", classes="hint")
            yield Label("c copy the URL · o open it in a browser · escape close", id="jupyter-status",
                        classes="hint")

    def action_copy(self) -> None:
        self.app.copy_to_clipboard(self.link.url)  # OSC 52: works over ssh and in tmux with set-clipboard
        self._status("copied to the clipboard (if your terminal accepts OSC 52; else select it)")

    def action_open(self) -> None:
        if self.browser is None:
            self._status("opening a browser is not available here: copy the URL")
            return
        self._open(self.browser)

    @work(thread=True, exclusive=True)
    def _open(self, browser: Callable[[str], str]) -> None:
        try:
            text = browser(self.link.url)
        except DevenvError as e:
            text = e.message + (f" ({e.hint})" if e.hint else "")
        self.app.call_from_thread(self._status, text)

    def _status(self, text: str) -> None:
        self.query_one("#jupyter-status", Label).update(text)

    def action_close(self) -> None:
        self.dismiss(None)
