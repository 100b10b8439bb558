"""The session picker (`tao --resume`): this repository's saved sessions, newest first; Enter resumes one."""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from harness.saved import SavedSession
from harness.vocabulary import Status

ENDED_STYLE: dict[str, str] = {Status.FINISHED: "green", Status.KILLED: "red", Status.ERROR: "red",
                               Status.LIMIT: "yellow", Status.INTERRUPTED: "yellow"}


def label(session: SavedSession) -> Text:
    """One line: when it last ran, its steps, how it ended, and the first line of its task."""
    text = Text()
    text.append(f"{session.when()}  ", style="dim")
    text.append(f"{session.steps:>3} {'step' if session.steps == 1 else 'steps':<5}  ")
    text.append(f"{session.ended:<11} ", style=ENDED_STYLE.get(session.ended, ""))
    text.append(session.task)
    return text


class SessionPicker(ModalScreen[Path | None]):
    """Lists saved sessions; dismisses with the chosen trajectory (Enter) or None (Escape)."""

    DEFAULT_CSS = """
    SessionPicker { align: center middle; }
    SessionPicker > Vertical { width: 120; max-width: 95%; height: auto; max-height: 85%;
                               border: thick $primary; background: $surface; padding: 0 1; }
    SessionPicker OptionList { height: auto; max-height: 30; border: none; }
    SessionPicker #picker-help { color: $text-muted; }
    """

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, sessions: list[SavedSession], repo: Path) -> None:
        super().__init__()
        self.sessions, self.repo = sessions, repo

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = f"Resume a session of {self.repo.name}"
            yield OptionList(*(Option(label(s), id=str(i)) for i, s in enumerate(self.sessions)))
            yield Static("↑↓ choose · Enter resumes · Esc starts a new session instead", id="picker-help")

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(self.sessions[event.option_index].path)

    def action_cancel(self) -> None:
        self.dismiss(None)
