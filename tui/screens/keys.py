"""The keys screen (`?`): every key of the main screen and what it does."""

from __future__ import annotations

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

KEYS = (
    ("Enter", "send the task, or a follow-up message (queued while the agent works)"),
    ("Ctrl+C", "interrupt the current step; the session goes on (copies instead when text is selected)"),
    ("Ctrl+T", "turn speculation off or on"),
    ("Ctrl+G", "show the workspace diff"),
    ("?  / F1", "show these keys"),
    ("Ctrl+Q", "quit (the session is saved; `tao --resume` reopens it)"),
    ("y / a / n", "in an approval: approve once, always for this command, deny"),
)


class KeysScreen(ModalScreen[None]):
    """A table of keys; any of Escape, q or ? closes it."""

    DEFAULT_CSS = """
    KeysScreen { align: center middle; }
    KeysScreen > Vertical { width: 100; max-width: 95%; height: auto; border: thick $primary;
                            background: $surface; padding: 1 2; }
    """

    BINDINGS = [Binding("escape,q,question_mark,f1", "app.pop_screen", "Close")]

    def compose(self) -> ComposeResult:
        table = Table(box=None, show_header=False, padding=(0, 2))
        table.add_column(style="bold cyan", no_wrap=True)
        table.add_column()
        for key, what in KEYS:
            table.add_row(key, what)
        with Vertical() as box:
            box.border_title = "Keys"
            yield Static(table)
