"""One task's Think-Act-Observe loop: ask the engine, run the tool it calls, feed back the result.

Every step emits events (harness.events) to the sinks: the trajectory file, the --json stream, the
human log. The loop ends when the model calls finish, a limit is reached, or the engine fails; the
last event, session_end, says which, and carries the workspace's diff as the submission.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime, timezone

from harness import protocol
from harness.engine.base import Chunk, Engine, LLMRequest, Usage
from harness.errors import EngineError, Finished, LimitExceeded, SessionStop
from harness.events import (Event, FormatError, LLMEnd, LLMFirstToken, LLMStart, SessionEnd, SessionStart,
                            ToolCall, ToolResult)
from harness.speculation.observation import ObservationSpeculator, Warm
from harness.speculation.patterns import Analyzer, Partial
from harness.speculation.prefix import args_prefix_of
from harness.speculation.scheduler import Budget, SpeculationScheduler
from harness.submission import git_diff
from sandbox import Workspace
from tools import run_tool, tool_specs
from tools.base import Effect, Observation, Tool

EventSink = Callable[[Event], None]
PREFIX_CHARS = 8  # first-argument characters after which moment (c) predicts once more


@dataclass(frozen=True)
class SessionConfig:
    """Limits and knobs of one session."""

    max_steps: int = 30
    """Model turns before the session stops with status `limit`."""
    max_seconds: float = 1800.0
    """Wall-clock budget for the whole session, in seconds."""
    max_tokens: int = 1024
    """Output tokens allowed per model turn."""


@dataclass(frozen=True)
class Answer:
    """One model turn, parsed."""

    text: str
    calls: list[protocol.ParsedCall]
    errors: list[protocol.CallError]


class Session:
    """Runs one task against an engine and a set of tools in one workspace."""

    def __init__(self, task: str, engine: Engine, workspace: Workspace, tools: list[Tool],
                 config: SessionConfig = SessionConfig(), sinks: list[EventSink] | None = None,
                 analyzer: Analyzer | None = None, budget: Budget = Budget(), warm: bool = True,
                 provisional: bool = False) -> None:
        """With an `analyzer`, predicted calls run ahead of the model (speculation); without, none do.

        `warm` pre-fills the next prompt on a guessed observation while a slow tool runs; `provisional`
        also starts the next Think step on it (both need speculation and a prefix-caching engine).
        """
        self.task, self.engine, self.workspace, self.config = task, engine, workspace, config
        self.tools = {tool.name: tool for tool in tools}
        self.sinks = list(sinks or [])
        self.speculation = (SpeculationScheduler(workspace, self.tools, analyzer, self.emit, self.now, budget)
                            if analyzer is not None else None)
        if self.speculation is not None:
            self.sinks.insert(0, self.speculation.observe)
        self.observation = (ObservationSpeculator(engine, self.emit, self.now, provisional)
                            if self.speculation is not None and warm else None)
        self._provisional: Warm | None = None  # a next Think step started on a guess that proved right
        self.session_id = uuid.uuid4().hex[:12]
        self.steps = 0
        self.output_tokens = 0
        self._t0 = time.monotonic()
        system = protocol.render_system_prompt(tool_specs(tools), str(workspace.root), engine.native_tools)
        self.messages: list[dict] = [{"role": "system", "content": system}, {"role": "user", "content": task}]

    def emit(self, event: Event) -> None:
        for sink in self.sinks:
            sink(event)

    def now(self) -> float:
        return round(time.monotonic() - self._t0, 6)

    async def run(self) -> SessionEnd:
        """Loop until finish, a limit or an engine failure; always ends with a session_end event."""
        self.emit(SessionStart(self.now(), self.session_id, self.task, str(self.workspace.root), self.engine.name,
                               sorted(self.tools), {"max_steps": self.config.max_steps,
                                                    "max_seconds": self.config.max_seconds,
                                                    "speculation": self.speculation is not None},
                               datetime.now(timezone.utc).isoformat(timespec="seconds")))
        status, reason, summary = "error", "", ""
        try:
            async with asyncio.timeout(self.config.max_seconds):
                while True:
                    await self.step()
        except Finished as stop:
            status, reason, summary = stop.status, "the model called finish", stop.summary
        except SessionStop as stop:
            status, reason = stop.status, str(stop)
        except TimeoutError:
            status, reason = "limit", f"wall-time limit of {self.config.max_seconds:g} s reached"
        except EngineError as exc:
            status, reason = "error", f"engine failed: {exc}"
        except asyncio.CancelledError:
            status, reason = "interrupted", "interrupted by the user"
            raise
        finally:
            if self.observation is not None:
                await self.observation.close()
            if self.speculation is not None:
                await self.speculation.close()
            end = SessionEnd(self.now(), status, reason, summary, self.steps,
                             await asyncio.to_thread(git_diff, self.workspace.root), self.output_tokens)
            self.emit(end)
            await self.close_tools()
        return end

    async def step(self) -> None:
        """One Think-Act-Observe step: a model turn, then each call it made."""
        if self.steps >= self.config.max_steps:
            raise LimitExceeded(f"step limit of {self.config.max_steps} reached")
        self.steps += 1
        if self.speculation is not None:
            self.speculation.launch("a", self.steps)
        answer = await self.query()
        if not answer.calls:
            error = answer.errors[0].error if answer.errors else protocol.FORMAT_REMINDER
            self.emit(FormatError(self.now(), self.steps, error))
            self.messages.append({"role": "user", "content": error})
            return
        for call in answer.calls:
            await self.act(call)

    async def query(self) -> Answer:
        """Stream one answer from the engine, parsing calls as they arrive."""
        request = LLMRequest(f"{self.session_id}-{self.steps}", list(self.messages),
                             tool_specs(list(self.tools.values())), self.config.max_tokens)
        stream = await self.open_stream(request)
        self.emit(LLMStart(self.now(), self.steps, request.request_id, len(request.messages)))
        parser = protocol.CallParser(id_prefix=f"call_{self.steps}")
        self._prefixed: set[int] = set()  # calls whose first-argument prefix has been predicted on
        raw, native, usage, finish_reason = "", None, Usage(), None
        async for chunk in stream:
            if chunk.text:
                if not raw:
                    self.emit(LLMFirstToken(self.now(), self.steps, request.request_id))
                raw += chunk.text
                for event in parser.feed(chunk.text):
                    self.speculate_early(event, parser)
            native = chunk.tool_calls or native
            usage = chunk.usage or usage
            finish_reason = chunk.finish_reason or finish_reason
        parser.finish()
        self.output_tokens += usage.output_tokens
        self.emit(LLMEnd(self.now(), self.steps, request.request_id, raw, native, finish_reason,
                         usage.prompt_tokens, usage.cached_tokens, usage.output_tokens, usage.ttft,
                         usage.decode_seconds))
        if native:
            calls, errors = protocol.parse_native_calls(native)
            self.messages.append({"role": "assistant", "content": raw, "tool_calls": native})
        else:
            calls, errors = parser.calls, parser.errors
            # The model's own words, verbatim: the next prompt then shares its tokens with this answer's
            # KV cache. An answer cut at the stop string gets its closing tag back.
            content = raw + protocol.CLOSE if calls and not raw.rstrip().endswith(protocol.CLOSE) else raw
            self.messages.append({"role": "assistant", "content": content})
        return Answer(parser.text, calls, errors)

    async def act(self, call: protocol.ParsedCall) -> Observation:
        """Run one call authoritatively and feed its observation back to the model."""
        tool = self.tools.get(call.name)
        effect = tool.effect.value if tool else "unknown"
        self.workspace.refresh()  # count edits made behind Tao's back before this call, not during it
        self.emit(ToolCall(self.now(), self.steps, call.call_id, call.name, call.arguments, effect))
        if call.name == "finish":
            raise Finished(str(call.arguments.get("summary", "")))
        started = time.monotonic()
        if tool is None:
            observation = Observation(f"Unknown tool {call.name!r}. Available tools: {', '.join(sorted(self.tools))}.",
                                      is_error=True)
        else:
            promoted = await self.speculation.take(call) if self.speculation is not None else None
            warm = self.warm_up(call, tool) if promoted is None else None
            observation = promoted or await run_tool(tool, call.arguments, self.workspace)
            if warm is not None and self.observation is not None:
                self._provisional = await self.observation.settle(warm, observation.text)
            if tool.effect is Effect.MUTATING:
                self.workspace.bump()
            elif tool.effect is Effect.SANDBOXED:
                self.workspace.refresh()  # a test run may write files; the next results must see a new version
        self.emit(ToolResult(self.now(), self.steps, call.call_id, call.name, observation.text,
                             observation.is_error, observation.exit_code, observation.truncated_chars,
                             self.workspace.version, round(time.monotonic() - started, 6)))
        self.messages.append(protocol.result_message(call, observation.text, self.engine.native_tools))
        return observation

    async def open_stream(self, request: LLMRequest) -> AsyncIterator[Chunk]:
        """The engine's answer; a provisional step already started on the right guess is adopted."""
        provisional, self._provisional = self._provisional, None
        if provisional is None or self.observation is None:
            return self.engine.stream(request)
        if provisional.request.messages == request.messages:
            return self.observation.adopt(provisional)
        await self.observation.drop(provisional)  # a second call in the same turn changed the prompt
        return self.engine.stream(request)

    def warm_up(self, call: protocol.ParsedCall, tool: Tool) -> Warm | None:
        """Pre-fill the next prompt on the output this call gave last time, while it runs for real."""
        if self.observation is None or self.speculation is None or tool.effect is not Effect.SANDBOXED:
            return None
        predicted = self.speculation.last_output(call)
        if predicted is None:
            return None
        messages = [*self.messages, protocol.result_message(call, predicted, self.engine.native_tools)]
        return self.observation.start(self.steps, call.call_id, predicted, messages,
                                      tool_specs(list(self.tools.values())), self.config.max_tokens)

    def speculate_early(self, event: protocol.ParseEvent, parser: protocol.CallParser) -> None:
        """Moments (b) and (c): the reasoning is complete; the call's name and first characters are known."""
        if self.speculation is None:
            return
        match event:
            case protocol.CallStart():
                self.speculation.launch("b", self.steps, Partial(text=parser.text))
            case protocol.CallName(name=name):
                self.speculation.launch("c", self.steps, Partial(text=parser.text, name=name))
            case protocol.CallArgs(index=index, name=name, partial=raw) if index not in self._prefixed:
                if len(prefix := args_prefix_of(raw)) >= PREFIX_CHARS:
                    self._prefixed.add(index)
                    self.speculation.launch("c", self.steps, Partial(text=parser.text, name=name, args_prefix=prefix))

    async def close_tools(self) -> None:
        for tool in self.tools.values():
            close = getattr(tool, "close", None)
            if close is not None:
                result = close()
                if asyncio.iscoroutine(result):
                    await result
