"""The conversation pane: the task, the model's streaming words, each call with its result, the turn ends.

It follows the bottom while new entries arrive, until the user scrolls up (Textual's anchor). Text in
it can be selected with the mouse and copied (Ctrl+C copies a selection instead of interrupting).
"""

from __future__ import annotations

from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Collapsible, Static

from harness.checkpoints import describe_undo
from harness.events import (Approval, Attached, ContextCleared, ContextCompact, Event, FormatError, Interrupt,
                            LLMDelta, LLMEnd, SessionResume, SessionStart, ToolCall, ToolResult, TurnEnd, Undone,
                            UserMessage)
from harness.log import counted
from harness.vocabulary import Status
from tui.widgets.conversation.render import call_summary, edit_diff, prose

RESULT_LINES = 40  # lines of a result shown in the pane; the whole result is in the trajectory
EDIT_TOOLS = ("edit_file", "write_file")


class CallEntry(Collapsible):
    """One tool call: its summary as the title, its result (collapsed) or its diff (open) inside."""

    DEFAULT_CSS = """
    CallEntry { margin: 0; padding: 0; border-top: none; background: $background; }
    CallEntry.error CollapsibleTitle { color: $error; }
    CallEntry Contents { padding: 0 0 0 2; }
    """

    def __init__(self, event: ToolCall) -> None:
        self.summary = call_summary(event.name, event.arguments, 100)
        diff = edit_diff(event.arguments) if event.name in EDIT_TOOLS else None
        self.is_edit = diff is not None
        self.body = Static(diff if diff is not None else Text("running…", style="dim italic"), classes="result")
        self.output = Static(classes="result")  # under an edit's diff: the tool's answer
        super().__init__(self.body, self.output, title=self.title_text("…"), collapsed=not self.is_edit,
                         id=f"call-{event.call_id}")

    def title_text(self, mark: str) -> str:
        """The title: a mark (… running, ✔ done, ✘ failed) and the call."""
        return f"{mark} {self.summary.plain}"

    def finish(self, event: ToolResult) -> None:
        """Show the result: a mark in the title, the output inside (under the diff for an edit)."""
        self.title = self.title_text("✘" if event.is_error else "✔")
        self.set_class(event.is_error, "error")
        lines = event.output.splitlines()
        shown = "\n".join(lines[:RESULT_LINES]) + (f"\n… {len(lines) - RESULT_LINES} more lines"
                                                   if len(lines) > RESULT_LINES else "")
        if self.is_edit:
            self.output.update(Text(shown, style="red" if event.is_error else "dim"))
        else:
            self.body.update(Text(shown or "(no output)", style="red" if event.is_error else ""))


class ConversationPane(VerticalScroll):
    """Renders conversation events as they come; `apply` takes one event."""

    DEFAULT_CSS = """
    ConversationPane { width: 1fr; padding: 0 1; }
    ConversationPane .task { border: round $primary; padding: 0 1; margin-bottom: 1; }
    ConversationPane .user { color: $accent; text-style: bold; margin: 1 0 0 0; }
    ConversationPane .answer { margin: 1 0 0 0; }
    ConversationPane .note { color: $text-muted; text-style: italic; }
    ConversationPane .deny { color: $error; }
    ConversationPane .warning { color: $warning; }
    ConversationPane .allow { color: $success; }
    ConversationPane .end { border-top: dashed $primary-darken-2; color: $success; margin-bottom: 1; }
    ConversationPane .end.failed { color: $warning; }
    """

    def __init__(self) -> None:
        super().__init__(id="conversation")
        self._answer: Static | None = None  # the answer streaming in
        self._streamed = ""
        self._calls: dict[str, CallEntry] = {}

    def on_mount(self) -> None:
        self.anchor()

    def apply(self, event: Event) -> None:
        """Take one event into the pane."""
        match event:
            case SessionStart():
                self.add(Static(Text.assemble(("Task\n", "bold"), event.task), classes="task"))
            case SessionResume():
                self.add(Static(f"— session resumed after step {event.steps}; type a follow-up —", classes="note"))
            case UserMessage():
                self.add(Static(Text.assemble(("You: ", "bold"), event.text), classes="user"))
            case LLMDelta():
                self.stream(event.text)
            case LLMEnd():
                self.end_answer(prose(event.text))
            case ToolCall() if event.name != "finish":
                call = CallEntry(event)
                self._calls[event.call_id] = call
                self.add(call)
            case ToolResult() if (entry := self._calls.get(event.call_id)) is not None:
                entry.finish(event)
            case Approval():
                verb = "allowed" if event.decision == "allow" else "denied"
                said = f": {event.message}" if event.message else ""
                self.add(Static(f"{verb} by {event.by}: {event.command}{said}", classes=f"note {event.decision}"))
            case FormatError():
                self.add(Static("the answer held no tool call; the model was reminded of the format", classes="note"))
            case ContextCompact():
                self.add(Static(f"context compacted: {counted(len(event.messages), 'older tool result')} replaced by "
                                f"a stub, about {event.freed:,} tokens freed", classes="note"))
            case Interrupt():
                self.end_answer(None)
                self.add(Static(f"⏹ interrupted ({event.stage})", classes="note deny"))
            case Attached(files=files, notes=notes) if files or notes:  # the mention shows, not the file
                attached = [f"attached {', '.join(files)}"] if files else []
                self.say("\n".join([*attached, *notes]), "deny" if notes else "")
            case Undone():
                done = describe_undo(event.turn, event.label, event.modified, event.removed, event.recreated)
                self.say(f"↶ {done}")
            case ContextCleared():
                self.end_answer(None)
                self._calls.clear()
                if self.is_attached:
                    self.remove_children()
                self.say("conversation cleared: your next message starts a new task, and the model sees nothing "
                         "before it (the trajectory keeps everything)")
            case TurnEnd():
                label = event.summary or event.reason
                failed = "" if event.status == Status.FINISHED else " failed"
                self.add(Static(f"■ {event.status}: {label}", classes="end" + failed))

    def say(self, text: str, kind: str = "") -> None:
        """A line from Tao itself (a command's answer, an attachment), set apart from the model's words."""
        self.add(Static(Text(text), classes=f"note said {kind}".strip()))

    def note(self, text: str, kind: str = "") -> None:
        """A line from Tao itself (not the session): `kind` is "", "warning" or "deny" (an error)."""
        self.add(Static(text, classes=f"note {kind}".strip()))

    def add(self, widget: Static | Collapsible) -> None:
        """Append an entry at the bottom (the anchor keeps it in view unless the user scrolled up)."""
        if self.is_attached:  # events may still arrive while the app closes
            self.mount(widget)

    def stream(self, piece: str) -> None:
        """Grow the current answer by one streamed piece (tool-call markup hidden)."""
        self._streamed += piece
        if self._answer is None:
            self._answer = Static(classes="answer")
            self.add(self._answer)
        self._answer.update(prose(self._streamed))

    def end_answer(self, text: str | None) -> None:
        """The answer is complete: show its final words (a replayed history has no streamed pieces)."""
        if text is not None and self._answer is None and text:
            self.add(Static(text, classes="answer"))
        elif text is not None and self._answer is not None:
            self._answer.update(text)
            if not text:
                self._answer.remove()
        self._answer, self._streamed = None, ""
