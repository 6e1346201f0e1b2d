"""The monitor's key hints: Textual's Footer, but the hints wrap onto more rows instead of being cut at the
right edge (Textual's Footer is one scrolling row: at 80 columns `? Help` and `q Quit` fell off). The hints
keep the order of the bindings (the app lists `?` and `q` first), each hint whole on one row."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from rich.cells import cell_len
from textual import events
from textual.app import ComposeResult
from textual.containers import HorizontalGroup
from textual.screen import Screen
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

# What a hint shows: its key, the key's display, description, action, whether enabled, tooltip.
Hint = tuple[str, str, str, str, bool, str]


def pack(widths: list[int], width: int) -> list[int]:
    """How many hints go on each row: greedily, in order, as many as fit `width` cells (at least one a row)."""
    rows: list[int] = []
    used = 0
    for w in widths:
        if rows and used + w <= width:
            rows[-1] += 1
            used += w
        else:
            rows.append(1)
            used = w
    return rows


class WrappingFooter(Footer):
    DEFAULT_CSS = """
    WrappingFooter {
        layout: vertical;
        height: auto;
        max-height: 6;
    }
    WrappingFooter > HorizontalGroup.hint-row {
        width: 100%;
        height: 1;
    }
    """

    def __init__(self) -> None:
        super().__init__(show_command_palette=True)
        self._packed_width = 0
        self._shown: list[Hint] | None = None   # the hints the last compose laid out

    def _hints(self) -> Iterator[Hint]:
        """One hint per shown binding (one per action), in the bindings' order; the palette's key last."""
        seen: set[str] = set()
        palette = self.app.COMMAND_PALETTE_BINDING if self.app.ENABLE_COMMAND_PALETTE else None
        for key, (_, binding, enabled, tooltip) in self.screen.active_bindings.items():
            if not binding.show or binding.action in seen or key == palette:
                continue
            seen.add(binding.action)
            yield (binding.key, self.app.get_key_display(binding), binding.description, binding.action, enabled,
                   tooltip)
        if palette and palette in self.screen.active_bindings:
            _, binding, enabled, tooltip = self.screen.active_bindings[palette]
            yield (binding.key, self.app.get_key_display(binding), binding.description, binding.action, enabled,
                   binding.tooltip or binding.description)

    def bindings_changed(self, screen: Screen[Any]) -> None:
        # Textual's Footer lays its hints out again (every FooterKey unmounted, made and styled anew) each time the
        # screen publishes its bindings: every focus change and every screen pushed or popped, most of which change
        # no hint (a Tab between host panels). That was a good part of the monitor's CPU on a key (and of the TUI
        # tests'). Laid out again only when what the hints show changed; a new width does it in on_resize.
        if (self._shown is not None and self.is_attached and screen is self.screen and screen.app.app_focus
                and list(self._hints()) == self._shown):
            return
        super().bindings_changed(screen)

    @staticmethod
    def _width(key: FooterKey) -> int:
        # FooterKey's padding (not compact): " key " then "description "
        return cell_len(key.key_display) + 2 + (cell_len(key.description) + 1 if key.description else 0)

    def compose(self) -> ComposeResult:
        if not self._bindings_ready:
            return
        self._shown = hints = list(self._hints())
        keys = [FooterKey(key, display, description, action, disabled=not enabled, tooltip=tooltip)
                .data_bind(compact=Footer.compact) for key, display, description, action, enabled, tooltip in hints]
        self._packed_width = width = self.size.width or self.app.size.width
        at = 0
        for count in pack([self._width(k) for k in keys], width):
            yield HorizontalGroup(*keys[at:at + count], classes="hint-row")
            at += count

    def on_resize(self, event: events.Resize) -> None:
        if event.size.width != self._packed_width and self._bindings_ready:
            self.call_after_refresh(self.recompose)
