"""The session's side of speculation: what starts ahead of the model at each moment of a step, and its failures.

`Session` (harness.session) inherits this, so its loop stays on one screen: the loop calls `launch` at moment
(a) and the answer's parser events reach `speculate_early`; the calls the model writes out in full start here
while the answer goes on (a chain after an edit, the calls of a turn of several). A failure in speculation
turns it off for the rest of the session (`guarded`); the model's calls then run for real. Observation warming
(`warm_up`, `open_stream`) also lives here: the scheduler itself is harness.speculation.running.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from harness import protocol
from harness.approval import ApprovalPolicy, request_for
from harness.engine.api import Chunk, Engine, LLMRequest
from harness.events import Event, SpecReady, SpecToggle
from harness.speculation.prediction.patterns import Partial
from harness.speculation.prediction.prefix import args_prefix_of
from harness.speculation.running.observation import ObservationSpeculator, Warm
from harness.speculation.running.records import Speculation
from harness.speculation.running.scheduler import SpeculationScheduler
from harness.vocabulary import DiscardReason, Moment, SpecState
from tools import tool_specs
from tools.base import Effect, Tool

if TYPE_CHECKING:
    from harness.session import SessionConfig

T = TypeVar("T")
_log = logging.getLogger(__name__)
PREFIX_CHARS = 8  # first-argument characters after which moment (c) predicts once more


class Speculating:
    """Speculation's part of a step and its on/off switch; mixed into Session, whose state it shares."""

    speculation: SpeculationScheduler | None
    observation: ObservationSpeculator | None
    speculating: bool
    _speculation_broke: bool
    _provisional: Warm | None
    _prefixed: set[int]
    _written: protocol.ParsedCall | None
    engine: Engine
    tools: dict[str, Tool]
    config: SessionConfig
    approval: ApprovalPolicy | None
    messages: list[dict[str, Any]]
    steps: int
    prompt_tokens: int

    if TYPE_CHECKING:  # Session's own
        def emit(self, event: Event) -> None: ...
        def now(self) -> float: ...
        def effect_of(self, name: str) -> Effect: ...

    def warm_up(self, call: protocol.ParsedCall, tool: Tool) -> Warm | None:
        """Pre-fill the next prompt on the output this call gave last time, while it runs for real."""
        speculation = self.active_speculation
        if self.observation is None or speculation is None or tool.effect is not Effect.SANDBOXED:
            return None
        predicted = self.guarded("guessing an output", lambda: speculation.last_output(call))
        if predicted is None:
            return None
        messages = [*self.messages, protocol.result_message(call, predicted, self.engine.native_tools)]
        return self.observation.start(self.steps, call.call_id, predicted, messages,
                                      tool_specs(list(self.tools.values())), self.config.max_tokens,
                                      self.prompt_tokens)

    def speculate_early(self, event: protocol.ParseEvent, parser: protocol.CallParser) -> None:
        """Moments (b) and (c): the reasoning is complete; the call's name and first characters are known."""
        if self.speculation is None:
            return
        match event:
            case protocol.CallStart(index=index):
                if index > 0 and self._written is not None:  # a turn of several calls: the first one may start
                    self.start_written(self._written)
                self._written = None
                self.launch(Moment.B, Partial(text=parser.text))
            case protocol.CallDone(index=index, call=call):
                self.written_out(index, call, parser)
            case protocol.CallName(index=index, name=name):
                if index == 0 and (speculation := self.active_speculation) is not None:
                    # its place may go to a candidate of this tool
                    self.guarded("narrowing", lambda: speculation.narrow(name))
                self.launch(Moment.C, Partial(text=parser.text, name=name))
            case protocol.CallArgs(index=index, name=name, partial=raw) if index not in self._prefixed:
                if len(prefix := args_prefix_of(raw)) >= PREFIX_CHARS:
                    self._prefixed.add(index)
                    self.launch(Moment.C, Partial(text=parser.text, name=name, args_prefix=prefix))

    def written_out(self, index: int, call: protocol.ParsedCall, parser: protocol.CallParser) -> None:
        """A call is written out in full while the answer may go on: an edit may start the call predicted after
        it in an overlay that holds it (a chain); a call of a turn of several may start at once."""
        if (scheduler := self.active_speculation) is None:
            return
        if self.effect_of(call.name) is Effect.MUTATING:
            self._written = None
            before = [done for done in parser.calls if done is not call]
            request = request_for(call.name, call.arguments, Effect.MUTATING)
            # code a person has not approved yet is not run, even in the sandbox
            follow = self.approval is None or (request is not None and self.approval.allows_unasked(request.text,
                                                                                                    request.edit))
            self.announce(self.guarded("chaining", lambda: scheduler.chain(call, self.steps, before, follow)))
        elif index == 0:
            self._written = call  # started only if a second call follows: alone, it ends the answer
        else:
            self.start_written(call)

    def start_written(self, call: protocol.ParsedCall) -> None:
        """Start a call of a turn of several as soon as it is written out, while the answer goes on."""
        if (speculation := self.active_speculation) is None:
            return
        spec = self.guarded("starting a written call", lambda: speculation.start_streamed(call, self.steps))
        if spec is not None and spec.task is not None:
            spec.task.add_done_callback(functools.partial(self.ready_when_done, spec))

    @property
    def active_speculation(self) -> SpeculationScheduler | None:
        """The scheduler while speculation is on (the user may turn it off and on)."""
        return self.speculation if self.speculating else None

    def launch(self, moment: Moment, partial: Partial | None = None) -> None:
        """Start the predicted calls worth it at this moment, and say when each one is ready."""
        if self.speculation is None:
            return
        speculation = self.speculation
        if not self.speculating:
            if not self._speculation_broke:  # here no call is waiting on one
                self.guarded("discarding", lambda: speculation.discard_all(DiscardReason.TURNED_OFF))
            return
        for spec in self.guarded("predicting", lambda: speculation.launch(moment, self.steps, partial)) or []:
            self.announce(spec)

    def announce(self, spec: Speculation | None) -> None:
        """Say when a speculation just started is ready."""
        if spec is not None and spec.task is not None:
            spec.task.add_done_callback(functools.partial(self.ready_when_done, spec))

    def observe_speculation(self, event: Event) -> None:
        """The first sink: speculation learns from every event (while it works)."""
        if self.speculation is not None and not self._speculation_broke:
            self.guarded("learning", lambda: self.speculation.observe(event))  # type: ignore[union-attr]

    def guarded(self, doing: str, work: Callable[[], T]) -> T | None:
        """Do speculation's part of a step; if it fails, speculation is turned off and the session goes on."""
        try:
            return work()
        except Exception as exc:  # noqa: BLE001 - see speculation_failed
            self.speculation_failed(doing, exc)
            return None

    def speculation_failed(self, doing: str, exc: Exception) -> None:
        """Speculation may only ever cost time: a failure in it (a bug) turns it off for the rest of the session,
        says so (spec_toggle, and a warning in the log), and the model's calls run for real from then on."""
        first = not self._speculation_broke
        self._speculation_broke = True
        if first:
            _log.warning("speculation failed while %s (%s: %s); it is off for the rest of this session", doing,
                         type(exc).__name__, exc, exc_info=_log.isEnabledFor(logging.DEBUG))
        if self.speculating:
            self.speculating = False
            self.emit(SpecToggle(self.now(), self.steps, False))
        if first and self.speculation is not None:
            try:
                self.speculation.discard_all(DiscardReason.BROKEN, detail=type(exc).__name__)
            except Exception:  # noqa: BLE001 - already broken; what still runs ends with the session
                pass

    def ready_when_done(self, spec: Speculation, _task: asyncio.Future[Any]) -> None:
        """A done-callback of a speculation's task: `ready`."""
        self.ready(spec)

    def ready(self, spec: Speculation) -> None:
        """A speculation's run ended: say so while its result waits for the model's call."""
        if spec.state is SpecState.READY:
            duration = (spec.finished or time.monotonic()) - spec.started
            self.emit(SpecReady(self.now(), self.steps, spec.spec_id, round(duration, 6)))

    async def open_stream(self, request: LLMRequest) -> AsyncIterator[Chunk]:
        """The engine's answer; a provisional step already started on the right guess is adopted."""
        provisional, self._provisional = self._provisional, None
        if provisional is None or self.observation is None:
            return self.engine.stream(request)
        if provisional.request.messages == request.messages:
            return self.observation.adopt(provisional)
        await self.observation.drop(provisional)  # a second call in the same turn changed the prompt
        return self.engine.stream(request)

    def set_speculation(self, enabled: bool) -> bool:
        """Turn speculation on or off from the next moment on; False when this session has no analyzer."""
        if self.speculation is None or self._speculation_broke:
            return False
        if enabled != self.speculating:
            self.speculating = enabled
            self.emit(SpecToggle(self.now(), self.steps, enabled))
        return True
