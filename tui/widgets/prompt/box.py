"""The input box: the task first, then follow-up messages; `?` in an empty box shows the keys; `/` starts a command,
completed with Tab."""

from __future__ import annotations

from textual import events
from textual.message import Message
from textual.suggester import SuggestFromList
from textual.widgets import Input

from tui.command_list import COMMANDS


class PromptBox(Input):
    """An Input that asks for the keys screen when `?` is typed into it while it is empty."""

    DEFAULT_CSS = """
    PromptBox { dock: bottom; margin: 0 0 1 0; }
    """

    class HelpRequested(Message):
        """The user typed `?` into the empty box."""

    def __init__(self) -> None:
        super().__init__(placeholder="Describe the task and press Enter  (? for keys)", id="prompt",
                         suggester=SuggestFromList([name for name, _ in COMMANDS if name.startswith("/")]))

    async def _on_key(self, event: events.Key) -> None:
        if event.character == "?" and not self.value:
            event.stop()
            event.prevent_default()
            self.post_message(self.HelpRequested())
            return
        if event.key == "tab" and self.value.startswith("/") and self._suggestion:
            event.stop()
            event.prevent_default()
            self.value = self._suggestion  # complete the command
            self.cursor_position = len(self.value)
            return
        await super()._on_key(event)

    def waiting_for(self, what: str) -> None:
        """Say in the placeholder what typing here does now."""
        self.placeholder = {"task": "Describe the task and press Enter  (? for keys)",
                            "follow-up": "Send a follow-up message  (? for keys, Ctrl+C interrupts)",
                            "busy": "Working… type a follow-up to queue it  (Ctrl+C interrupts)",
                            "queued": "Waiting for the engine to load… type more to queue it  (Ctrl+Q quits)",
                            "retry": "The engine failed: Enter tries again  (Ctrl+Q quits)"}[what]
