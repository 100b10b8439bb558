"""The wire types between a session and an engine, and the Engine protocol. Pure data, no behaviour."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any, Protocol


# A cache-warming prefill's priority, and above it any speculative request's: vLLM runs lower numbers first, so
# warming waits behind every real request (and a tao gateway's co-scheduler treats it as speculative).
WARM_PRIORITY = 1_000


@dataclass(frozen=True)
class LLMRequest:
    """One chat completion: OpenAI-style messages, the tool specs, and scheduling hints."""

    request_id: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)  # OpenAI `tools` entries
    max_tokens: int = 1024
    priority: int = 0  # lower runs first (vLLM's convention); speculative work uses higher numbers
    force: str | None = None  # the exact answer to produce (replaying a recorded turn through a real engine)
    prompt_limit: int | None = None  # prefill only this many leading prompt tokens (a chunk of a warm prefill)


@dataclass(frozen=True)
class Usage:
    """What one request cost, reported on the final chunk."""

    prompt_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    ttft: float | None = None  # seconds from submit to first token
    decode_seconds: float | None = None  # seconds from first to last token


@dataclass(frozen=True)
class Chunk:
    """A piece of a streamed answer. The last chunk carries `usage` and `finish_reason`.

    `tool_calls` holds complete native calls (OpenAI shape: {"id", "function": {"name", "arguments"}})
    from engines that produce them; text-protocol engines leave it empty.
    """

    text: str = ""
    tool_calls: list[dict[str, Any]] | None = None
    usage: Usage | None = None
    finish_reason: str | None = None


@dataclass
class EngineLoad:
    """An engine's load as its scheduler last reported it."""

    running: int = 0  # requests in the running batch
    waiting: int = 0  # requests queued in the engine, not yet scheduled (preempted ones included)
    kv_usage: float = 0.0  # share of the KV cache's blocks held by running requests (0-1)


def engine_load(engine: object) -> EngineLoad | None:
    """What an engine reports of its load (`load()`: vLLM's scheduler counts, the simulated engine's books);
    None for engines that keep no such books (replay, a remote server)."""
    load = getattr(engine, "load", None)
    return load() if callable(load) else None


def for_session(engine: Engine, session_id: str, traffic: str) -> Engine:
    """The engine as one session sees it: a tao gateway's client gives each session its own view that sends the
    session's id and class (`OpenAIEngine.for_session`); every other engine is shared as it is."""
    view = getattr(engine, "for_session", None)
    return view(session_id, traffic) if callable(view) else engine


def replica_of(engine: Engine, session_id: str) -> Engine:
    """The replica a session sticks to: of several endpoints, the one `ReplicaSet.pin` chose for it
    (harness.engine.replicas); every other engine is its own one replica."""
    pin = getattr(engine, "pin", None)
    return pin(session_id) if callable(pin) else engine


def rename_session(engine: Engine, session_id: str) -> None:
    """Give a session's view (`for_session`) the session's new id: a resumed session keeps its saved one."""
    rename = getattr(engine, "rename", None)
    if callable(rename):
        rename(session_id)


class Engine(Protocol):
    """Anything that turns a request into a stream of chunks."""

    name: str  # shown to users and recorded in session_start, e.g. "replay:run.jsonl"
    native_tools: bool  # True when the engine returns tool calls itself (no text protocol needed)
    prefix_cache: bool  # True when a prefill request warms the cache for a later request with that prefix

    def stream(self, request: LLMRequest) -> AsyncGenerator[Chunk, None]: ...

    async def abort(self, request_id: str) -> None: ...

    async def close(self) -> None: ...
