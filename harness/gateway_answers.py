"""What the gateway (harness.gateway) answers a chat completion with: the engine's chunks as OpenAI
`chat.completion.chunk` server-sent events, or as one `chat.completion`.

    async for event in answer_stream(cosched, completion, Answer("model-id", parse_calls)): ...   # SSE bytes

An engine without native tool calls writes them in Tao's text protocol; with `parse_calls` they are parsed out
of the text and sent as OpenAI `tool_calls` (streamed, each call as one delta once it is complete).
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from harness import protocol
from harness.coscheduler import CoScheduler
from harness.engine.api import Chunk, Usage
from harness.errors import EngineError
from harness.gateway_requests import Completion, engine_error


def usage_json(usage: Usage | None) -> dict[str, Any]:
    """A Usage in OpenAI's shape, cached prompt tokens included."""
    usage = usage or Usage()
    return {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.output_tokens,
            "total_tokens": usage.prompt_tokens + usage.output_tokens,
            "prompt_tokens_details": {"cached_tokens": usage.cached_tokens}}


def tool_calls_json(calls: list[dict[str, Any]], start: int = 0) -> list[dict[str, Any]]:
    """Complete native calls as OpenAI `tool_calls` entries, each with its index in the answer (from `start`)."""
    return [{"index": i, "id": call.get("id") or f"call_{uuid.uuid4().hex[:24]}", "type": "function",
             "function": {"name": call["function"]["name"], "arguments": call["function"]["arguments"]}}
            for i, call in enumerate(calls, start)]


def native_call(call: protocol.ParsedCall) -> dict[str, Any]:
    """A call parsed from the text protocol as a native call (OpenAI shape), with an id of its own."""
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
            "function": {"name": call.name, "arguments": json.dumps(call.arguments)}}


class ProtocolCalls:
    """Splits an answer in Tao's text protocol into its text and its calls, as they complete. A malformed call
    stays in the text as it was written, for the client's model to see."""

    def __init__(self) -> None:
        self.parser = protocol.CallParser()

    def feed(self, text: str, last: bool) -> tuple[str, list[dict[str, Any]]]:
        """The text outside calls and the calls completed by this piece of the answer (`last`: the end)."""
        events = self.parser.feed(text) + (self.parser.finish() if last else [])
        parts: list[str] = []
        calls: list[dict[str, Any]] = []
        for event in events:
            if isinstance(event, protocol.Text):
                parts.append(event.text)
            elif isinstance(event, protocol.CallDone):
                calls.append(native_call(event.call))
            elif isinstance(event, protocol.CallError):
                parts.append(f"{protocol.OPEN}{event.raw}{protocol.CLOSE}")
        return "".join(parts), calls


def finish_reason(chunk: Chunk, calls: bool) -> str:
    """The engine's reason, `tool_calls` when an answer that stopped by itself made calls."""
    reason = chunk.finish_reason or "stop"
    return "tool_calls" if calls and reason == "stop" else reason


class Answer:
    """Turns one request's chunks into OpenAI completion chunks (streaming) or one completion; `parse_calls`:
    the engine writes calls in Tao's text protocol and the client wants them as `tool_calls`."""

    def __init__(self, model: str, parse_calls: bool = False) -> None:
        self.model, self.id, self.created = model, f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        self.text: list[str] = []
        self.calls: list[dict[str, Any]] = []
        self.started = False
        self.protocol = ProtocolCalls() if parse_calls else None

    def delta(self, chunk: Chunk) -> list[dict[str, Any]]:
        """The stream events one engine chunk makes: a delta, then on the last chunk the reason and the usage."""
        events: list[dict[str, Any]] = []
        delta: dict[str, Any] = {} if self.started else {"role": "assistant"}
        text, calls = chunk.text, list(chunk.tool_calls or [])
        if self.protocol is not None:
            text, parsed = self.protocol.feed(text, chunk.finish_reason is not None)
            calls += parsed
        if text:
            delta["content"] = text
            self.text.append(text)
        if calls:
            delta["tool_calls"] = tool_calls_json(calls, len(self.calls))
            self.calls.extend(calls)
        if "content" in delta or "tool_calls" in delta:
            events.append(self.event([{"index": 0, "delta": delta, "finish_reason": None}]))
            self.started = True
        if chunk.finish_reason is not None:
            reason = finish_reason(chunk, bool(self.calls))
            events.append(self.event([{"index": 0, "delta": {}, "finish_reason": reason}]))
            events.append(self.event([], usage_json(chunk.usage)))
        return events

    def event(self, choices: list[dict[str, Any]], usage: dict[str, Any] | None = None) -> dict[str, Any]:
        """One `chat.completion.chunk`."""
        out: dict[str, Any] = {"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                               "model": self.model, "choices": choices}
        if usage is not None:
            out["usage"] = usage
        return out

    def completion(self, last: Chunk) -> dict[str, Any]:
        """The whole answer as one `chat.completion`."""
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.text)}
        if self.calls:
            message["tool_calls"] = [{k: v for k, v in call.items() if k != "index"}
                                     for call in tool_calls_json(self.calls)]
        return {"id": self.id, "object": "chat.completion", "created": self.created, "model": self.model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish_reason(last, bool(self.calls))}],
                "usage": usage_json(last.usage)}


def sse(data: dict[str, Any] | str) -> bytes:
    """One server-sent event."""
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode()


async def answer_stream(cosched: CoScheduler, completion: Completion, answer: Answer) -> AsyncIterator[bytes]:
    """The SSE body; closing it (the client went away) closes the co-scheduler's stream, which aborts the request."""
    try:
        async with contextlib.aclosing(cosched.stream(completion.session_id, completion.request)) as chunks:
            async for chunk in chunks:
                for event in answer.delta(chunk):
                    yield sse(event)
    except EngineError as exc:  # the status line is sent: the error travels in the stream, as vLLM sends it
        yield sse(engine_error(exc)[1])
    yield sse("[DONE]")


async def answer_whole(cosched: CoScheduler, completion: Completion, answer: Answer) -> tuple[int, dict[str, Any]]:
    """The whole answer of a non-streamed request."""
    last = Chunk()
    async with contextlib.aclosing(cosched.stream(completion.session_id, completion.request)) as chunks:
        async for chunk in chunks:
            answer.delta(chunk)
            last = chunk
    return 200, answer.completion(last)
