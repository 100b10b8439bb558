"""What a session offers around its turns: a checkpoint before each, undo, a fresh context, @file attachments.

`Session` (harness.session) inherits this, so its loop stays on one screen: the loop calls `checkpoint`
when work on a message begins and `attach` when a message arrives; front ends call `undo` and `clear`
between turns. Each leaves an event, so a resumed session rebuilds the same context (harness.history).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from harness.checkpoints import CheckpointError, Checkpoints, Restored, from_events
from harness.events import Attached, Checkpointed, ContextCleared, Event, Undone
from harness.mentions import expand

if TYPE_CHECKING:
    from sandbox import Workspace

_log = logging.getLogger(__name__)


class BetweenTurns:
    """Checkpoints, undo, clear and attachments; mixed into Session, whose state it shares."""

    messages: list[dict[str, Any]]
    workspace: Workspace
    steps: int
    _open: list[Any]

    if TYPE_CHECKING:  # Session's own
        def emit(self, event: Event) -> None: ...
        def now(self) -> float: ...

    def between_turns(self, task: str) -> None:
        """Start the state of this part (Session's __init__ calls it)."""
        self.checkpoints: Checkpoints | None = None  # set by interactive front ends: a checkpoint before each turn
        self.working = False  # between a message and the end of the work on it
        self.turn = 0  # pieces of work begun: the task is turn 1, each follow-up one more
        self._label = _first_line(task)  # the message of the coming turn, to label its checkpoint
        self._for_model: list[str] = []  # what the model must hear with the next message (an undo)

    async def checkpoint(self) -> None:
        """Record the work tree before a turn, so that `undo` can go back to it; a failure only costs the undo."""
        if self.checkpoints is None:
            return
        self.turn += 1
        try:
            taken = await asyncio.to_thread(self.checkpoints.snapshot, self.turn, self._label)
        except CheckpointError as exc:
            _log.warning("no checkpoint before turn %d, so /undo cannot go back past it: %s", self.turn, exc)
            return
        self.emit(Checkpointed(self.now(), self.steps, taken.turn, taken.commit, taken.tree, taken.label))

    async def undo(self) -> Restored | None:
        """Put the files back as they were before the last turn that changed them; None when none did.

        Only between turns (a CheckpointError says so otherwise). The model hears of it with the next message.
        """
        if self.checkpoints is None:
            raise CheckpointError("this session keeps no checkpoints, so there is nothing to undo")
        if self.working:
            raise CheckpointError("the agent is working: interrupt it (Ctrl+C) or wait for the turn to end, then undo")
        restored = await asyncio.to_thread(self.checkpoints.undo)
        if restored is None:
            return None
        self.workspace.bump()  # files changed behind the tools' back: no result from before may be served
        done = restored.checkpoint
        self.emit(Undone(self.now(), self.steps, done.turn, done.commit, restored.saved, restored.modified,
                         restored.removed, restored.recreated, done.label))
        self._for_model.append(f"(The user undid the file changes of turn {done.turn}, \"{done.label}\": the files "
                               f"are back as they were before it. Do not assume those changes exist.)")
        return restored

    def clear(self) -> int | None:
        """Start the model afresh from the system prompt (the trajectory keeps everything): how many messages went;
        None while the agent works (only between turns)."""
        if self.working:
            return None
        dropped = len(self.messages) - 1
        self.messages, self._open, self._for_model = self.messages[:1], [], []
        self.emit(ContextCleared(self.now(), self.steps, dropped))
        return dropped

    def attach(self, text: str) -> None:
        """Add the files the user's message mentions (@path), and what the model must hear, to that message."""
        self._label = _first_line(text)
        expansion = expand(text, self.workspace.root)
        content = "".join(f"\n\n{note}" for note in self._for_model) + expansion.content
        self._for_model = []
        if content:
            self.messages[-1] = {**self.messages[-1], "content": self.messages[-1]["content"] + content}
            self.emit(Attached(self.now(), content, expansion.files, expansion.notes))

    def adopt_checkpoints(self, events: list[Event]) -> None:
        """A resumed session goes on counting turns, and can undo the turns of before (their commits still kept)."""
        self.turn = max((e.turn for e in events if isinstance(e, Checkpointed)), default=0)
        if self.checkpoints is not None:
            self.checkpoints.adopt(from_events(events))


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0][:80] if text.strip() else ""
