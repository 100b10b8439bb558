"""The approval modal: a shell command that may change the workspace waits for the user's word."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static

from harness.approval import Answer


class ApprovalScreen(ModalScreen[Answer]):
    """Approve once, always (this command, this session), or deny with a message to the model."""

    DEFAULT_CSS = """
    ApprovalScreen { align: center middle; }
    ApprovalScreen > Vertical { width: 80%; max-width: 100; height: auto; border: thick $warning; padding: 1 2;
                                background: $surface; }
    ApprovalScreen #command { background: $panel; padding: 0 1; margin: 1 0; }
    ApprovalScreen Horizontal { height: auto; margin-top: 1; }
    ApprovalScreen Button { margin-right: 2; }
    """

    BINDINGS = [Binding("y", "answer('once')", "Approve once", show=False),
                Binding("a", "answer('always')", "Always", show=False),
                Binding("n", "deny", "Deny", show=False),
                Binding("escape", "deny", "Deny", show=False)]

    def __init__(self, command: str) -> None:
        super().__init__()
        self.command = command

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(Text("The model wants to run a command that may change the workspace:", style="bold"))
            yield Static(Text(self.command), id="command")
            yield Input(placeholder="Message to the model if you deny (optional), Enter denies", id="deny-message")
            with Horizontal():
                yield Button("Approve once (y)", id="once", variant="success")
                yield Button("Always this command (a)", id="always", variant="primary")
                yield Button("Deny (n)", id="deny", variant="error")

    def on_mount(self) -> None:
        self.query_one("#once", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "deny":
            self.action_deny()
        else:
            self.action_answer(event.button.id or "once")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_deny()

    def action_answer(self, choice: str) -> None:
        self.dismiss(Answer(choice))

    def action_deny(self) -> None:
        self.dismiss(Answer("deny", self.query_one("#deny-message", Input).value.strip()))
