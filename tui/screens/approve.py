"""The approval modal: a call that may change the workspace waits for the user's word.

Only `y` (once) and `a` (always) approve, or a click on their buttons; Enter, Escape and `n` deny, and
so does everything else by default: focus starts on Deny, and the approve buttons never take focus. Keys
that arrive in the first GUARD_SECONDS were typed for something else (a follow-up, as the modal opened
under it), so they are dropped, and the choices and their keys show only once the guard is over.
"""

from __future__ import annotations

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static

from harness.approval import Answer

GUARD_SECONDS = 0.6  # keys this soon after the modal opens neither approve nor deny
WAITING = "Read what it wants to do; the keys work in a moment."
KEYS = "y approve once · a always, this session · n, Enter or Esc deny · other keys write a reason"


class ApprovalScreen(ModalScreen[Answer]):
    """Approve once, always (this command or file, this session), or deny with a message to the model."""

    DEFAULT_CSS = """
    ApprovalScreen { align: center middle; }
    ApprovalScreen > Vertical { width: 80%; max-width: 100; height: auto; border: thick $warning; padding: 1 2;
                                background: $surface; }
    ApprovalScreen #command { background: $panel; padding: 0 1; margin: 1 0; }
    ApprovalScreen Horizontal { height: auto; margin-top: 1; }
    ApprovalScreen Button { margin-right: 2; }
    ApprovalScreen #keys { margin-top: 1; color: $text-muted; }
    """

    BINDINGS = [Binding("y", "answer('once')", "Approve once", show=False),
                Binding("a", "answer('always')", "Always", show=False),
                Binding("n", "deny", "Deny", show=False),
                Binding("escape", "deny", "Deny", show=False)]

    def __init__(self, command: str, guard: float = GUARD_SECONDS) -> None:
        """`guard`: seconds during which keys are dropped (tests pass a long one and call `arm`)."""
        super().__init__()
        self.command, self.guard, self.ready = command, guard, False

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(Text("The model wants to do something that may change the workspace:", style="bold"))
            yield Static(Text(self.command), id="command")
            yield Input(placeholder="Why not? Told to the model with the denial (optional). Enter denies.",
                        id="deny-message", disabled=True, select_on_focus=False)  # a first key is kept
            with Horizontal(id="choices"):
                yield Button("Deny (n, Enter)", id="deny", variant="error")
                yield Button("Approve once (y)", id="once", variant="success")
                yield Button("Always, this session (a)", id="always", variant="primary")
            yield Static(WAITING, id="keys")

    def on_mount(self) -> None:
        for button in self.query_one("#choices").query(Button):
            button.can_focus = button.id == "deny"  # Enter or Space never approves
        self.query_one("#choices").display = False
        if self.guard > 0:
            self.set_timer(self.guard, self.arm)
        else:
            self.call_after_refresh(self.arm)  # Textual's timers take no zero interval

    def arm(self) -> None:
        """The guard is over: show the choices and their keys, with focus on Deny."""
        if self.ready:
            return
        self.ready = True
        self.query_one("#choices").display = True
        self.query_one("#deny-message", Input).disabled = False
        self.query_one("#keys", Static).update(KEYS)
        self.query_one("#deny", Button).focus()

    def on_key(self, event: events.Key) -> None:
        """Drop keys during the guard; after it, a key that is no choice starts the message to the model."""
        message = self.query_one("#deny-message", Input)
        if not self.ready:
            event.stop()
            event.prevent_default()
        elif self.focused is not message and event.is_printable and event.character not in ("y", "a", "n", " "):
            event.stop()
            event.prevent_default()
            message.focus()
            message.insert_text_at_cursor(event.character or "")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "deny":
            self.action_deny()
        else:
            self.action_answer(event.button.id or "deny")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_deny()

    def action_answer(self, choice: str) -> None:
        self.settle(Answer(choice))

    def action_deny(self) -> None:
        self.settle(Answer("deny", self.query_one("#deny-message", Input).value.strip()))

    def settle(self, answer: Answer) -> None:
        """Close with `answer`, unless the guard is still on (then the key was not meant for this modal)."""
        if self.ready:
            self.dismiss(answer)
