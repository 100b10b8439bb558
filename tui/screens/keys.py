"""The help screen (`?`, F1, `/help`): the slash commands, and every key of the main screen, and what they do."""

from __future__ import annotations

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from tui.command_list import COMMANDS

KEYS = (
    ("Enter", "send the task, or a follow-up message (queued while the agent works)"),
    ("Ctrl+C", "interrupt the current step; the session goes on (copies instead when text is selected)"),
    ("Ctrl+T", "turn speculation off or on"),
    ("Ctrl+G", "show the workspace diff"),
    ("?  / F1", "show these keys"),
    ("Ctrl+Q", "quit (the session is saved; `tao --resume` reopens it)"),
    ("y / a / n", "in an approval: approve once, always for this command, deny"),
    ("Tab / →", "complete a /command"),
)


class KeysScreen(ModalScreen[None]):
    """A table of commands and one of keys; any of Escape, q or ? closes it."""

    DEFAULT_CSS = """
    KeysScreen { align: center middle; }
    KeysScreen > Vertical { width: 100; max-width: 95%; height: auto; border: thick $primary;
                            background: $surface; padding: 1 2; }
    KeysScreen .keys { margin-top: 1; }
    """

    BINDINGS = [Binding("escape,q,question_mark,f1", "app.pop_screen", "Close")]

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = "Commands and keys"
            yield Static(_table(COMMANDS))
            yield Static(_table(KEYS), classes="keys")


def _table(rows: tuple[tuple[str, str], ...]) -> Table:
    table = Table(box=None, show_header=False, padding=(0, 2))
    table.add_column(style="bold cyan", no_wrap=True, min_width=10)
    table.add_column()
    for key, what in rows:
        table.add_row(key, what)
    return table
