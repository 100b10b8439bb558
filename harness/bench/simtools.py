"""Simulated tools for multi-session benchmarks: recorded observations after recorded latencies.

    book = await record_book(session, cache)        # once: the session replayed with the real tools
    tools = sim_tools(book)                         # the default tools' names, schemas and effect classes

Each recorded session (harness.bench.recordings) is replayed once against its real repository with the
real tools, speculation off; every call's output and duration are kept, keyed by the call's canonical
key and the number of mutating calls made before it (the workspace version a simulated session has
at that point, since simulated tools change no file). A simulated tool sleeps for the recorded
duration and returns the recorded observation; a call that was never recorded (a wrong speculative
guess) takes the modelled latency of its kind (harness.speculation.prediction.latency) and returns a note. The
effect classes are the real tools', so speculation launches, isolates and promotes exactly as it would.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.bench import recordings as recorded
from harness.engine.recorded import ReplayEngine
from harness.errors import TaoError
from harness.events import Event, ToolCall, ToolResult
from harness.launch import SessionOptions, open_session
from harness.session import SessionConfig
from harness.calls.canonical import canonical
from harness.speculation.prediction.latency import modelled_latency
from harness.vocabulary import Status
from sandbox import Workspace
from tools import default_tools
from tools.base import Effect, Observation, Tool

BOOK_FORMAT = 1


@dataclass(frozen=True)
class RecordedCall:
    """One real tool run: its output and how long it took."""

    key: str
    epoch: int  # mutating calls made before it in the session
    name: str
    output: str
    is_error: bool
    exit_code: int | None
    truncated_chars: int
    duration: float


@dataclass(frozen=True)
class Book:
    """Every call of one recorded session, as its real run answered it."""

    session: str
    calls: list[RecordedCall]

    def find(self, key: str, epoch: int) -> RecordedCall | None:
        """The recorded run of the call with this key at this epoch (the last one, if it ran twice)."""
        found = [c for c in self.calls if c.key == key and c.epoch == epoch]
        return found[-1] if found else None

    def tool_seconds(self) -> float:
        """Seconds the session's calls took in all."""
        return sum(c.duration for c in self.calls)


def calls_of(events: list[Event], root: str) -> list[RecordedCall]:
    """The recorded calls of one session's events."""
    effects = {tool.name: tool.effect for tool in default_tools()}
    pending: dict[str, ToolCall] = {}
    epoch, calls = 0, []
    for event in events:
        if isinstance(event, ToolCall):
            pending[event.call_id] = event
        elif isinstance(event, ToolResult) and (call := pending.pop(event.call_id, None)) is not None:
            key = canonical(call.name, call.arguments, root).key
            calls.append(RecordedCall(key, epoch, call.name, event.output, event.is_error, event.exit_code,
                                      event.truncated_chars, round(event.duration, 4)))
            if effects.get(call.name) is Effect.MUTATING:
                epoch += 1
    return calls


def book_path(session: recorded.LiveSession, cache: Path) -> Path:
    """Where a session's book is kept (a new recipe or new turns make a new file)."""
    recipe = json.dumps({"stamp": session.stamp(), "turns": [t.text for t in session.recording.turns],
                         "format": BOOK_FORMAT}, sort_keys=True)
    digest = hashlib.sha256(recipe.encode()).hexdigest()[:12]
    return cache / "books" / f"{session.name}-{digest}.json"


def checkout(session: recorded.LiveSession, cache: Path) -> Path:
    """A fresh copy of the session's template (built in `tao bench live`'s cache) under our own cache."""
    source = recorded.template(session, recorded.cache_dir())
    target = cache / "run" / session.name / session.dirname
    shutil.rmtree(target.parent, ignore_errors=True)
    target.parent.mkdir(parents=True)
    shutil.copytree(source, target, symlinks=True)
    return target


async def record_book(session: recorded.LiveSession, cache: Path) -> Book:
    """The session's book: read from the cache, or recorded now by replaying it with the real tools."""
    path = book_path(session, cache)
    if path.is_file():
        data = json.loads(path.read_text(encoding="utf-8"))
        return Book(data["session"], [RecordedCall(**c) for c in data["calls"]])
    repo = await asyncio.to_thread(checkout, session, cache)
    events: list[Event] = []
    workspace = Workspace(repo)
    config = SessionConfig(max_steps=len(session.recording.turns) + 1, max_seconds=900.0)
    loop = open_session(SessionOptions(config=config), session.recording.task or "", ReplayEngine(session.recording),
                        workspace, [events.append])
    try:
        end = await loop.run()
    finally:
        workspace.close()
    if end.status != Status.FINISHED:  # never cache a book of a run that went wrong: every later run would replay it
        raise TaoError(f"recording the tools' answers for {session.name} failed: the session ended "
                         f"{end.status} ({end.reason}) after {end.steps} steps; nothing was cached. Check that "
                         f"`tao bench live --only {session.name}` runs, then try again.")
    book = Book(session.name, calls_of(events, str(workspace.root)))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"session": book.session, "calls": [asdict(c) for c in book.calls]}, indent=1),
                    encoding="utf-8")
    return book


class SimTool:
    """A tool with a real tool's name, schema and effect class that answers from a book."""

    def __init__(self, real: Tool, book: Book) -> None:
        self.name, self.description, self.parameters, self.effect = (real.name, real.description, real.parameters,
                                                                     real.effect)
        self.book = book

    async def run(self, args: dict[str, Any], workspace: Any) -> Observation:
        """Sleep as long as the recorded run took, then return its output."""
        action = canonical(self.name, args, str(workspace.root))
        found = self.book.find(action.key, workspace.version)
        if found is None:
            await asyncio.sleep(modelled_latency(action))
            return Observation(f"(simulated {self.name}: no recorded run of this call at this point)", is_error=True)
        await asyncio.sleep(found.duration)
        return Observation(found.output, found.is_error, found.exit_code, found.truncated_chars)


def sim_tools(book: Book) -> list[Tool]:
    """The default tool set, simulated from one session's book."""
    return [SimTool(tool, book) for tool in default_tools()]
