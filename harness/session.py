"""One task's Think-Act-Observe loop: ask the engine, run the tool it calls, feed back the result.

Every step emits events (harness.events) to the sinks: the trajectory file, the --json stream, the
human log, the TUI. The work on a message ends when the model calls finish, a limit is reached, the
engine fails or the user interrupts; an interactive session then waits for the user's next message,
a headless one ends. The last event, session_end, says how, and carries the workspace's diff as the
submission. A saved session goes on from its trajectory (`restore`).

The loop is here; `Session` inherits its other parts, which share its state: harness.acting runs and
answers a turn's calls, harness.speculating is speculation's side of a step (and its switch), and
harness.between what a session offers around its turns (checkpoints, undo, clear, attachments).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import datetime, UTC
from typing import Any

from harness import context, protocol, together
from harness.acting import Acting
from harness.approval import ApprovalPolicy
from harness.between import BetweenTurns
from harness.engine.api import Engine, LLMRequest, Usage, for_session, rename_session
from harness.errors import ContextTooLong, EngineError, Finished, Interrupted, LimitExceeded, SessionStop
from harness.events import (ContextCompact, Event, FormatError, Interrupt, LLMDelta, LLMEnd, LLMFirstToken, LLMStart,
                            SessionEnd, SessionResume, SessionStart, TurnEnd, UserMessage)
from harness.hints import ToolHints
from harness.history import assistant_message, rebuild
from harness.speculating import Speculating
from harness.speculation.running.observation import ObservationSpeculator, Warm
from harness.speculation.prediction.patterns import Analyzer
from harness.speculation.running.records import Budget
from harness.speculation.running.scheduler import SpeculationScheduler
from harness.submission import git_diff
from harness.vocabulary import DiscardReason, Moment, Status, Traffic
from sandbox import Workspace
from tools import tool_specs
from tools.base import Effect, Observation, Tool

EventSink = Callable[[Event], None]
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SessionConfig:
    """Limits and knobs of one session."""

    max_steps: int = 30
    """Model turns before the session stops with status `limit` (for each user message)."""
    max_seconds: float = 1800.0
    """Wall-clock budget for the work on one user message, in seconds."""
    max_tokens: int = 1024
    """Output tokens allowed per model turn."""


@dataclass(frozen=True)
class Answer:
    """One model turn, parsed."""

    text: str
    calls: list[protocol.ParsedCall]
    errors: list[protocol.CallError]


@dataclass(frozen=True)
class Outcome:
    """How the work on one user message ended, as turn_end and session_end record it."""

    status: str  # a Status (a resumed session's as its trajectory recorded it)
    reason: str
    summary: str = ""


class Session(BetweenTurns, Acting, Speculating):
    """Runs one task against an engine and a set of tools in one workspace."""

    def __init__(self, task: str, engine: Engine, workspace: Workspace, tools: list[Tool],
                 config: SessionConfig = SessionConfig(), sinks: list[EventSink] | None = None,
                 analyzer: Analyzer | None = None, budget: Budget = Budget(), warm: bool = True,
                 provisional: bool = False, approval: ApprovalPolicy | None = None, interactive: bool = False,
                 live_sinks: list[EventSink] | None = None) -> None:
        """With an `analyzer`, predicted calls run ahead of the model (speculation); without, none do.

        `warm` pre-fills the next prompt on a guessed observation while a slow tool runs; `provisional`
        also starts the next Think step on it (both need speculation and a prefix-caching engine).
        `approval` judges shell commands and edits before they run (None: all run). An `interactive` session waits
        for follow-up messages (`send`) after each piece of work; `live_sinks` also get llm_delta events. On a
        `tao serve` gateway the session has its own view of the engine, ranked interactive when a person is there.
        """
        self.session_id = uuid.uuid4().hex[:12]
        engine = for_session(engine, self.session_id, Traffic.INTERACTIVE if interactive else Traffic.BATCH)
        self.task, self.engine, self.workspace, self.config = task, engine, workspace, config
        self.tools = {tool.name: tool for tool in tools}
        self.sinks = list(sinks or [])
        self.speculation = (SpeculationScheduler(workspace, self.tools, analyzer, self.emit, self.now, budget)
                            if analyzer is not None else None)
        if self.speculation is not None:
            self.sinks.insert(0, self.observe_speculation)
        self.observation = (ObservationSpeculator(engine, self.emit, self.now, provisional)
                            if self.speculation is not None and warm else None)
        self._provisional: Warm | None = None  # a next Think step started on a guess that proved right
        self.approval, self.live_sinks = approval, list(live_sinks or [])
        self.inbox: asyncio.Queue[str | None] | None = asyncio.Queue() if interactive else None
        self.speculating = self.speculation is not None
        self._speculation_broke = False  # speculation failed once: off for good, the session goes on without it
        self.resumed: Outcome | None = None  # how the saved session had stopped, once restored
        self.hints = ToolHints(engine, str(workspace.root))
        self.steps = 0
        self.output_tokens = 0
        self.prompt_tokens = 0
        self._t0 = time.monotonic()
        self._turn_start = 0  # steps taken before the current user message
        self._step_task: asyncio.Task[None] | None = None
        self._open: list[protocol.ParsedCall] = []  # calls of the last answer that have no result yet
        self._ran: dict[str, tuple[Observation, float]] = {}  # open calls whose run ended, by id: their results
        self._request_id = ""
        self.between_turns(task)
        self.window = context.window_of(engine)  # tokens; None when the engine does not know it
        self.meter = context.Meter()
        system = protocol.render_system_prompt(tool_specs(tools), str(workspace.root), engine.native_tools,
                                               context.project_instructions(workspace.root))
        self.messages: list[dict] = [{"role": "system", "content": system}, {"role": "user", "content": task}]

    def emit(self, event: Event) -> None:
        for sink in self.sinks:
            sink(event)

    def emit_live(self, event: Event) -> None:
        """Events for front ends only (llm_delta), never written to a trajectory."""
        for sink in self.live_sinks:
            sink(event)

    def now(self) -> float:
        return round(time.monotonic() - self._t0, 6)

    async def run(self) -> SessionEnd:
        """Work on the task, then on each follow-up message; always ends with a session_end event."""
        self.emit(self.opening())
        outcome = self.resumed or Outcome(Status.ERROR, "")
        try:
            if self.resumed is None:
                self.attach(self.task)
            more = self.resumed is None or await self.next_message(None)
            while more:
                outcome = await self.work()
                more = await self.next_message(outcome)
        except asyncio.CancelledError:
            outcome = Outcome(Status.INTERRUPTED, "interrupted by the user")
            raise
        finally:
            if self.observation is not None:
                await self.observation.close()
            if self.speculation is not None and not self._speculation_broke:
                try:
                    await self.speculation.close()
                except Exception as exc:  # noqa: BLE001 - see speculation_failed
                    self.speculation_failed("closing", exc)
            end = SessionEnd(self.now(), outcome.status, outcome.reason, outcome.summary, self.steps,
                             await self.workspace_diff(), self.output_tokens)
            self.emit(end)
            await self.close_tools()
        return end

    async def work(self) -> Outcome:
        """Steps until the model finishes, a limit is reached, the engine fails or the user interrupts."""
        self._turn_start = self.steps
        self.working = True
        await self.checkpoint()
        try:
            async with asyncio.timeout(self.config.max_seconds):
                while True:
                    await self.interruptible(self.step())
        except Finished as stop:
            return Outcome(stop.status, "the model called finish", stop.summary)
        except SessionStop as stop:
            return Outcome(stop.status, str(stop))
        except TimeoutError:
            return Outcome(Status.LIMIT, f"wall-time limit of {self.config.max_seconds:g} s reached")
        except EngineError as exc:
            return Outcome(Status.ERROR, f"engine failed: {exc}")
        finally:
            self.working = False

    async def step(self) -> None:
        """One Think-Act-Observe step: a model turn, then each call it made."""
        if self.steps - self._turn_start >= self.config.max_steps:
            raise LimitExceeded(f"step limit of {self.config.max_steps} reached")
        self.steps += 1
        self.launch(Moment.A)
        try:
            answer = await self.query()
        except ContextTooLong:
            if self.compact("too_long") is None:  # nothing left to shorten: the session ends with the error
                raise
            answer = await self.query()
        calls, told = protocol.in_order(answer.calls, answer.errors, self.engine.native_tools)
        self._open = [call for call, _ in calls]
        if not calls and not told:
            told = [protocol.FORMAT_REMINDER]
        if (speculation := self.active_speculation) is not None:  # each call of the turn may be served by one
            self.guarded("expecting", lambda: speculation.expect([call for call, error in calls if error is None]))
        for group in together.groups(calls, self.effect_of):
            await self.act(group)
        if told:
            self.tell("\n".join(told))

    def tell(self, error: str) -> None:
        """Tell the model what was wrong with its answer's calls (a text-protocol answer has no call ids)."""
        self.emit(FormatError(self.now(), self.steps, error))
        self.messages.append({"role": "user", "content": error})

    async def query(self) -> Answer:
        """Stream one answer from the engine, parsing calls as they arrive."""
        self.compact_if_due()
        request = LLMRequest(f"{self.session_id}-{self.steps}", list(self.messages),
                             tool_specs(list(self.tools.values())), self.config.max_tokens)
        stream = await self.open_stream(request)
        self._request_id = request.request_id
        self.emit(LLMStart(self.now(), self.steps, request.request_id, len(request.messages)))
        parser = protocol.CallParser(id_prefix=f"call_{self.steps}")
        self._prefixed: set[int] = set()  # calls whose first-argument prefix has been predicted on
        self._written: protocol.ParsedCall | None = None  # the answer's first call, complete, until a second begins
        raw, native, usage, finish_reason = "", None, Usage(), None
        async for chunk in stream:
            if chunk.text:
                text = protocol.valid_unicode(chunk.text)
                if not raw:
                    self.emit(LLMFirstToken(self.now(), self.steps, request.request_id))
                raw += text
                if self.live_sinks:
                    self.emit_live(LLMDelta(self.now(), self.steps, text))
                for event in parser.feed(text):
                    self.speculate_early(event, parser)
            native = chunk.tool_calls or native
            usage = chunk.usage or usage
            finish_reason = chunk.finish_reason or finish_reason
        parser.finish()
        self.output_tokens += usage.output_tokens
        self.prompt_tokens = usage.prompt_tokens  # in the engine's prefix cache now: warming starts there
        self.meter.calibrate(request.messages, usage.prompt_tokens)
        recorded = protocol.recordable_calls(native) if native else None
        self.emit(LLMEnd(self.now(), self.steps, request.request_id, raw, recorded, finish_reason,
                         usage.prompt_tokens, usage.cached_tokens, usage.output_tokens, usage.ttft,
                         usage.decode_seconds, self.window))
        calls, errors = protocol.parse_native_calls(native) if native else (parser.calls, parser.errors)
        self.messages.append(assistant_message(raw, recorded, bool(calls)))
        return Answer(parser.text, calls, errors)

    def compact_if_due(self) -> None:
        """Compact before a request whose prompt would come near the window (engines that know theirs)."""
        if self.window is not None:
            if self.meter.estimate(self.messages) > context.limit_for(self.window, self.config.max_tokens):
                self.compact("auto")

    def compact(self, reason: str = "user") -> ContextCompact | None:
        """Replace older tool observations by short stubs; returns the context_compact event it emitted, or None
        when nothing could go (`/compact` calls this between turns).

        Automatic compaction (`auto`) goes down to half the window, so the prefix cache lasts many steps; after
        the engine refused a prompt (`too_long`), down to the compaction limit; asked by the user (`user`),
        every observation but the recent turns' goes. A request in flight keeps its own copy of the messages.
        """
        target = None  # the user's /compact: all but the recent turns
        if self.window is not None and reason != "user":
            target = int(self.window * context.COMPACT_TO) if reason == "auto" else context.limit_for(
                self.window, self.config.max_tokens)
        chosen = context.plan_compaction(self.messages, self.meter, target)
        if not chosen:
            return None
        before = self.meter.estimate(self.messages)
        self.messages[:] = context.apply_stubs(self.messages, chosen)
        after = self.meter.estimate(self.messages)
        event = ContextCompact(self.now(), self.steps, reason, chosen, before, after, before - after, self.window)
        self.emit(event)
        return event

    def effect_of(self, name: str) -> Effect:
        """The effect class of a call of tool `name` (unknown for a tool this session does not have)."""
        tool = self.tools.get(name)
        return tool.effect if tool is not None else Effect.UNKNOWN

    # -- the user's side: follow-ups, interrupts, resuming (the speculation switch: harness.speculating) -----

    def send(self, text: str) -> None:
        """Queue a follow-up message; it is taken up when the current work ends."""
        if self.inbox is not None:
            self.inbox.put_nowait(text)

    def interrupt(self) -> bool:
        """Stop the current step (the model's answer or the tool it runs); False when none is running."""
        if self._step_task is None or self._step_task.done():
            return False
        return self._step_task.cancel()

    def stop(self) -> None:
        """End the session: interrupt what runs, and take no more messages."""
        if self.inbox is not None:
            self.inbox.put_nowait(None)
        self.interrupt()

    def restore(self, events: list[Event]) -> None:
        """Go on from a saved session: messages, steps and clock rebuilt from its trajectory's events."""
        history = rebuild(events, self.engine.native_tools)
        self.task, self.session_id = history.start.task, history.start.session_id
        rename_session(self.engine, self.session_id)  # a gateway knows the session by its saved id
        self.messages = [self.messages[0], *history.messages]
        self.steps, self.output_tokens = history.steps, history.output_tokens
        self._t0 = time.monotonic() - history.last_t
        self.resumed = Outcome(history.status, history.reason)
        self.adopt_checkpoints(events)
        if self.speculation is not None:
            try:
                for event in events:
                    if not event.type.startswith("spec_"):
                        self.speculation.analyzer.observe(event)  # predictions only; results are never reused
            except Exception as exc:  # noqa: BLE001 - a saved session the analyzer cannot follow only predicts less
                _log.warning("speculation could not learn from the saved session (%s: %s)", type(exc).__name__, exc)

    def opening(self) -> Event:
        """session_start, or session_resume for a restored session."""
        if self.resumed is not None:
            return SessionResume(self.now(), self.session_id, self.steps, _wall_clock())
        return SessionStart(self.now(), self.session_id, self.task, str(self.workspace.root), self.engine.name,
                            sorted(self.tools), {"max_steps": self.config.max_steps,
                                                 "max_seconds": self.config.max_seconds,
                                                 "speculation": self.speculating}, _wall_clock())

    async def next_message(self, outcome: Outcome | None) -> bool:
        """Wait for the user's next message and add it to the conversation; False when the session ends."""
        if self.inbox is None:
            return False
        if self.speculation is not None and not self._speculation_broke:
            self.guarded("discarding", lambda: self.speculation.discard_all(DiscardReason.MODEL_STOPPED))  # type: ignore[union-attr]
        if outcome is not None:
            self.emit(TurnEnd(self.now(), outcome.status, outcome.reason, outcome.summary, self.steps))
        text = await self.inbox.get()
        if text is None:
            return False
        for call in list(self._open):  # a finish call (and any after it): native tools want every call answered
            if self.engine.native_tools:
                self.answer(call, Observation("(the user replied)"), 0.0)
        self._open, self._ran = [], {}
        self.emit(UserMessage(self.now(), text))
        self.messages.append({"role": "user", "content": text})
        self.attach(text)
        return True

    async def interruptible(self, step: Coroutine[Any, Any, None]) -> None:
        """Run one step as a task of its own, so that `interrupt()` stops it and the session goes on."""
        self._step_task = asyncio.create_task(step)
        try:
            await self._step_task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # the session itself is cancelled, or its time is up
            await self.after_interrupt()
            raise Interrupted("interrupted by the user") from None
        finally:
            self._step_task = None

    async def after_interrupt(self) -> None:
        """Say what was cut, give each call left open an interrupted result, drop what ran ahead."""
        self.emit(Interrupt(self.now(), self.steps, "tool" if self._open else "model"))
        if not self._open and self._request_id:
            await self.engine.abort(self._request_id)
        if self._open:
            # A stopped call may have left the tree half changed, and its "result" must never be served
            # as a real run's at this version: count a new version.
            self.workspace.bump()
        for call in list(self._open):  # a call that ended beside one still running keeps its result
            self.answer(call, *self._ran.get(call.call_id, (Observation("[interrupted by the user]", is_error=True),
                                                           0.0)))
        if self.speculation is not None and not self._speculation_broke:
            self.guarded("discarding", lambda: self.speculation.discard_all(DiscardReason.INTERRUPTED))  # type: ignore[union-attr]
        if self.observation is not None:
            await self.observation.close()
        self._provisional = None

    async def workspace_diff(self) -> str:
        """`git diff` of the workspace against HEAD, untracked files included."""
        return await asyncio.to_thread(git_diff, self.workspace.root)

    async def close_tools(self) -> None:
        """Close what the tools hold (the bash tool's shell)."""
        for tool in self.tools.values():
            close = getattr(tool, "close", None)
            if close is not None:
                result = close()
                if asyncio.iscoroutine(result):
                    await result


def _wall_clock() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
