"""The diff screen: `git diff` of the repository against HEAD (Ctrl+G), or what the session changed since its first
checkpoint (`/diff`), coloured, read in a worker."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from harness.submission import git_diff
from tui.widgets.conversation.render import colour_diff


class DiffScreen(ModalScreen[None]):
    """Shows what the session has changed so far; Escape (or the same key again) closes it."""

    DEFAULT_CSS = """
    DiffScreen { align: center middle; }
    DiffScreen > VerticalScroll { width: 90%; height: 85%; border: thick $primary; background: $surface;
                                  padding: 0 1; }
    """

    BINDINGS = [Binding("escape,q,ctrl+g", "app.pop_screen", "Close")]

    def __init__(self, repo: Path, read: Callable[[], str] | None = None, title: str = "Workspace diff") -> None:
        """`read` gives the patch (run in a thread); by default the workspace against HEAD."""
        super().__init__()
        self.repo, self.title = repo, title
        self.read = read or (lambda: git_diff(repo))

    def compose(self) -> ComposeResult:
        with VerticalScroll() as scroll:
            scroll.border_title = f"{self.title} · {self.repo.name}  (Esc closes)"
            yield Static(Text("reading git diff…", style="dim"), id="diff")

    def on_mount(self) -> None:
        self.load()

    @work(exclusive=True)
    async def load(self) -> None:
        diff = await asyncio.to_thread(self.read)
        body = colour_diff(diff) if diff.strip() else Text("No changes yet.", style="dim")
        self.query_one("#diff", Static).update(body)
