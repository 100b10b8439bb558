"""A step's Act and Observe: run a group of the model's calls and feed their results back, in the order written.

`Session` (harness.session) inherits this, so its loop stays on one screen: `step` hands each group of calls
(harness.together) to `act`. A call is answered by its error, by a refusal (harness.approval), by a promoted
speculation or by a real run; each result is recorded (tool_result) and added to the conversation.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from harness import protocol, together
from harness.approval import ApprovalPolicy, request_for
from harness.engine.api import Engine
from harness.errors import Finished
from harness.events import Approval, Event, ToolCall, ToolResult
from harness.hints import ToolHints
from harness.speculation.running.observation import ObservationSpeculator, Warm
from harness.speculation.running.scheduler import SpeculationScheduler
from sandbox import Workspace
from tools import run_tool
from tools.base import Effect, Observation, Tool

T = TypeVar("T")


class Acting:
    """Runs and answers the model's calls; mixed into Session, whose state it shares."""

    engine: Engine
    workspace: Workspace
    tools: dict[str, Tool]
    hints: ToolHints
    approval: ApprovalPolicy | None
    observation: ObservationSpeculator | None
    _provisional: Warm | None
    messages: list[dict[str, Any]]
    steps: int
    _open: list[Any]
    _ran: dict[str, tuple[Observation, float]]

    if TYPE_CHECKING:  # Session's own, and its speculation's (harness.speculating)
        def emit(self, event: Event) -> None: ...
        def now(self) -> float: ...
        def effect_of(self, name: str) -> Effect: ...
        @property
        def active_speculation(self) -> SpeculationScheduler | None: ...
        def guarded(self, doing: str, work: Callable[[], T]) -> T | None: ...
        def speculation_failed(self, doing: str, exc: Exception) -> None: ...
        def warm_up(self, call: protocol.ParsedCall, tool: Tool) -> Warm | None: ...

    async def act(self, group: list[together.Entry]) -> list[Observation]:
        """Run a group of calls authoritatively (one call, or pure calls side by side: harness.together) and
        feed their observations back to the model in the order it wrote them."""
        self.workspace.refresh()  # count edits made behind Tao's back before these calls, not during them
        self.hints.group(len(group) > 1)
        for call, error in group:
            if error is None:  # a malformed native call runs nothing; it is only answered
                self.emit(ToolCall(self.now(), self.steps, call.call_id, call.name, call.arguments,
                                   self.effect_of(call.name).value))
                if call.name == "finish":
                    raise Finished(str(call.arguments.get("summary", "")))
        ran = await together.all_at_once([self.perform(call, error) for call, error in group])
        for (call, _), (observation, duration) in zip(group, ran):
            self.answer(call, observation, duration)
        return [observation for observation, _ in ran]

    async def perform(self, call: protocol.ParsedCall, error: str | None) -> tuple[Observation, float]:
        """One call's observation and the seconds it took; it is kept for the call until it is answered."""
        tool = self.tools.get(call.name)
        if error is not None:
            observation, took = Observation(error, is_error=True), 0.0
        elif tool is None:
            observation, took = Observation(f"Unknown tool '{protocol.printable(call.name)}'. Available tools: "
                                            f"{', '.join(sorted(self.tools))}.", is_error=True), 0.0
        elif (refused := await self.refusal(call, tool)) is not None:
            observation, took = refused, 0.0  # nothing ran
        else:
            observation, took = await self.execute(call, tool)
        if tool is not None and tool.effect is Effect.MUTATING and (speculation := self.active_speculation):
            # a speculation chained on this edit goes on at the new version, or is discarded (refused, failed)
            self.guarded("landing an edit", lambda: speculation.landed(call, observation))
        self._ran[call.call_id] = (observation, took)
        return observation, took

    async def execute(self, call: protocol.ParsedCall, tool: Tool) -> tuple[Observation, float]:
        """The call's observation (a promoted speculation's, or a real run's) and the seconds it took, once any
        approval was given: the duration its tool_result records and, after a real run, the hints' next estimate."""
        started = time.monotonic()
        speculation, promoted = self.active_speculation, None
        ahead = None if speculation is None else self.guarded(
            "timing the call", lambda: speculation.head_start(call.name, call.arguments))
        self.hints.started(call.name, call.arguments, ahead)  # tao serve learns when the session will be back
        if speculation is not None:
            try:
                promoted = await speculation.take(call)
            except Exception as exc:  # noqa: BLE001 - see speculation_failed
                self.speculation_failed("taking a result", exc)
        warm = self.warm_up(call, tool) if promoted is None else None
        observation = promoted if promoted is not None else await run_tool(tool, call.arguments, self.workspace)
        if warm is not None and self.observation is not None:
            self._provisional = await self.observation.settle(warm, observation.text)
        if tool.effect is Effect.MUTATING:
            self.workspace.bump()
        elif tool.effect is Effect.SANDBOXED:
            self.workspace.refresh()  # a test run may write files; the next results must see a new version
        took = round(time.monotonic() - started, 6)
        if promoted is None:  # a promoted call's wait is shortened by its head start: no estimate of a real run
            self.hints.ran(call.name, call.arguments, took)
        return observation, took

    def answer(self, call: protocol.ParsedCall, observation: Observation, duration: float) -> None:
        """Record a call's observation and feed it back to the model."""
        self.emit(ToolResult(self.now(), self.steps, call.call_id, call.name, observation.text,
                             observation.is_error, observation.exit_code, observation.truncated_chars,
                             self.workspace.version, round(duration, 6)))
        self.messages.append(protocol.result_message(call, observation.text, self.engine.native_tools))
        self.workspace.note_seen(observation.data.get("path"), observation.data.get("digest"))  # edit_file's ledger
        self._ran.pop(call.call_id, None)
        if call in self._open:
            self._open.remove(call)

    async def refusal(self, call: protocol.ParsedCall, tool: Tool) -> Observation | None:
        """Ask the approval policy about a shell command or an edit; the observation the model gets if refused."""
        request = request_for(call.name, call.arguments, tool.effect)
        if self.approval is None or request is None:
            return None
        verdict = await self.approval.decide(request.text, request.edit)
        if verdict is None:
            return None
        self.emit(Approval(self.now(), self.steps, call.call_id, request.text, "allow" if verdict.allow else "deny",
                           verdict.by, verdict.message))
        return None if verdict.allow else Observation(verdict.reason, is_error=True)
