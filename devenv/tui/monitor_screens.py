"""The monitor's dialogs: help, a yes/no confirmation (up/down), and a sanity run's live progress."""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label, ProgressBar, RichLog, Static


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "close", "Close")]
    KEYS = (
        ("tab / shift+tab", "select the next / previous host"),
        ("j", "Jupyter: open a tunnel and show the URL"),
        ("s", "run the quick sanity suite, with live progress"),
        ("u", "start the environment (asks first)"),
        ("d", "stop the environment (asks first)"),
        ("/", "filter hosts by name (escape clears)"),
        ("?", "this help"),
        ("q", "quit"),
    )

    def compose(self) -> ComposeResult:
        text = Text("Keys\n\n", "bold")
        for key, what in self.KEYS:
            text.append(f"{key:>16}", "bold cyan")
            text.append(f"  {what}\n")
        text.append("\nA '·' in a history is a gap: no samples (connection lost or stalled), never a zero.",
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
            yield Label(self.question, id="question")
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
