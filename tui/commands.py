"""Slash commands typed into the prompt (`/help`, `/diff`, `/undo`, `/clear`, `/model`, `/compact`,
`/resume`).

They run in the TUI and never reach the model. Their answers are lines in the conversation pane; the
session's own events (undo, context_clear) are drawn there by the pane as for any other event.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from harness.checkpoints import CheckpointError
from tui.command_list import COMMANDS
from tui.screens.diff import DiffScreen
from tui.screens.keys import KeysScreen
from tui.widgets.conversation.pane import ConversationPane
from tui.widgets.prompt.box import PromptBox

if TYPE_CHECKING:
    from harness.session import Session
    from tui.app import TaoApp

NAMES = [name for name, _ in COMMANDS if name.startswith("/")]
BETWEEN_TURNS = "The agent is working: wait for the turn to end, or interrupt it with Ctrl+C, then {} again."


def is_command(text: str) -> bool:
    """`/word ...` is a command; `/etc/hosts is missing` (a path) is a message for the model."""
    first = text.split(maxsplit=1)[0] if text.strip() else ""
    return first.startswith("/") and "/" not in first[1:]


class Commands:
    """Runs the commands of one app."""

    def __init__(self, app: TaoApp) -> None:
        self.app = app

    def run(self, text: str) -> None:
        """Run the command `text` starts with; an unknown one is answered with the list of commands."""
        name = text.split(maxsplit=1)[0].lower()
        handler = {"/help": self.help, "/diff": self.diff, "/undo": self.undo, "/clear": self.clear,
                   "/model": self.model, "/compact": self.compact,
                   "/resume": self.app.action_pick_session}.get(name)
        if handler is None:
            self.say(f"Unknown command {name}. Commands: {', '.join(NAMES)} (/help says what each does).", "deny")
            return
        handler()

    def say(self, text: str, kind: str = "") -> None:
        self.app.query_one(ConversationPane).say(text, kind)

    @property
    def session(self) -> Session | None:
        return self.app.live.session if self.app.live is not None else None

    def idle(self, doing: str) -> Session | None:
        """The session, when it is open and between turns; otherwise say why `doing` must wait and give None."""
        session = self.session
        if session is None:
            opening = self.app.worker is not None and self.app.worker.is_running
            self.say(f"The session is still starting; {doing} in a moment." if opening else
                     f"No session yet: type a task first, then {doing}.")
            return None
        if session.working:
            self.say(BETWEEN_TURNS.format(doing))
            return None
        return session

    # -- the commands -------------------------------------------------------------------------------

    def help(self) -> None:
        self.app.push_screen(KeysScreen())

    def diff(self) -> None:
        session = self.session
        store = session.checkpoints if session is not None else None
        if store is None or store.start is None:
            self.say("No checkpoint yet: the session's diff starts when it starts its first turn. "
                     "Ctrl+G shows the workspace's diff against HEAD.")
            return
        self.app.push_screen(DiffScreen(Path(store.root), lambda: store.diff() or "", "Changes of this session"))

    def undo(self) -> None:
        session = self.idle("undo")
        if session is not None:
            self.app.run_worker(self._undo(session), group="command", exit_on_error=False)

    async def _undo(self, session: Session) -> None:
        try:
            restored = await session.undo()
        except CheckpointError as exc:
            self.say(f"Cannot undo: {exc}.", "deny")
            return
        if restored is None:
            self.say("Nothing to undo: the files are as they were when the session started.")
        # else the session's undo event draws what was restored

    def clear(self) -> None:
        session = self.idle("clear")
        if session is not None:
            session.clear()  # its context_clear event empties the pane
            self.app.query_one("#prompt", PromptBox).waiting_for("task")

    def model(self) -> None:
        engine = self.app.options.engine
        using = self.app.live.engine.name if self.app.live is not None else engine.kind
        model = engine.model or ("the embedded model" if engine.kind == "vllm" else "the server's default")
        self.say(f"Engine: {using} (--engine {engine.kind}; model: {model}"
                 f"{f'; server: {engine.base_url}' if engine.base_url else ''}).\n"
                 "To use another, quit (Ctrl+Q) and start tao again with: --model NAME_OR_DIR (a local model for "
                 "vLLM), or --engine openai --base-url http://HOST:PORT/v1 --model NAME (any OpenAI-compatible "
                 "server). `tao --resume` then goes on with this session on the new model.")

    def compact(self) -> None:
        """Stub the older tool results now; the pane draws the session's context_compact event."""
        session = self.idle("compact")
        if session is not None and session.compact("user") is None:
            self.say("Nothing to compact: the model sees only the task, its answers and the recent turns' results.")
