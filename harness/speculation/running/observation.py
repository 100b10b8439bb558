"""Observation speculation and KV pre-warming (AOSpec).

While a slow tool runs for real, its observation can often be guessed: a test re-run usually prints
what it printed last time. The engine then pre-fills the next prompt (history, the model's answer,
the guessed observation) at the lowest priority, so that when the real observation arrives and is
byte-identical, the next Think step starts from a warm prefix cache instead of prefilling it all.
When it differs, the warm request is aborted and the next prompt is built from the real output only:
nothing of the guess reaches the model.

A warm prefill goes in chunks of `WARM_CHUNK_TOKENS` prompt tokens, one request each, every chunk
starting from the cache the one before it filled. An engine step that is running cannot be
pre-empted (on vLLM's CPU engine a 1,000-token prefill is one step of seconds), so a real request that
arrives during warming waits behind one chunk at most, and warming stops as soon as the real
observation is in. An engine that ignores `prompt_limit` gets the whole prompt in one request.

With `provisional`, the guess goes further: the next Think step itself starts on the guessed
observation, and its tokens are kept only on an exact match (otherwise aborted and discarded).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from harness.engine.api import WARM_PRIORITY, Chunk, Engine, LLMRequest, Usage
from harness.errors import EngineError
from harness.events import Event, SpecObsSettle, SpecObsWarm

WARM_CHUNK_TOKENS = 256  # a multiple of every usual KV block size (16, 128), so each chunk's blocks stay cached


@dataclass
class Warm:
    """One warm (or provisional) request on a guessed observation."""

    step: int
    call_id: str
    predicted: str
    request: LLMRequest
    provisional: bool
    chunks: list[Chunk] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    done: bool = False
    usage: Usage | None = None
    task: asyncio.Task[None] | None = None
    cached: int = 0  # prompt tokens already in the cache when warming started (the last real prompt's)
    current: str = ""  # the request in flight: a chunk's, or the provisional step's
    settled: bool = False  # the real observation is in: no further chunk starts
    aborted: bool = False  # the engine (or a co-scheduler) ended a request of it early


class ObservationSpeculator:
    """Starts warm requests on guessed observations and settles them against the real ones."""

    def __init__(self, engine: Engine, emit: Callable[[Event], None], now: Callable[[], float],
                 provisional: bool = False, chunk_tokens: int = WARM_CHUNK_TOKENS) -> None:
        self.engine, self.emit, self.now, self.provisional = engine, emit, now, provisional
        self.chunk_tokens = chunk_tokens
        self._live: dict[str, Warm] = {}
        self._count = 0

    @property
    def enabled(self) -> bool:
        """Warming needs an engine whose prefix cache a prefill request fills."""
        return bool(getattr(self.engine, "prefix_cache", False))

    def start(self, step: int, call_id: str, predicted: str, messages: list[dict[str, Any]],
              tools: list[dict[str, Any]], max_tokens: int, cached: int = 0) -> Warm | None:
        """Pre-fill `messages` (ending with the guessed observation) while the real tool runs.

        `cached`: prompt tokens the engine holds already (the last real prompt's), where chunks start.
        """
        if not self.enabled:
            return None
        self._count += 1
        request = LLMRequest(f"warm-{self._count}-{call_id}", messages, tools if self.provisional else [],
                             max_tokens if self.provisional else 1, WARM_PRIORITY)
        warm = Warm(step, call_id, predicted, request, self.provisional, cached=max(0, cached))
        warm.task = asyncio.create_task(self._run(warm))
        self._live[request.request_id] = warm
        self.emit(SpecObsWarm(self.now(), step, call_id, "last_run", self.provisional, len(predicted)))
        return warm

    async def _run(self, warm: Warm) -> None:
        try:
            if warm.provisional:
                await self._stream(warm, warm.request)
            else:
                await self._prefill_in_chunks(warm)
        except EngineError:
            pass  # a failed warm-up costs nothing; the real request reports the engine's state
        finally:
            warm.done = True
            warm.arrived.set()
            self._live.pop(warm.request.request_id, None)

    async def _prefill_in_chunks(self, warm: Warm) -> None:
        """One request per chunk of prompt tokens, until the prompt is all in or the guess is settled."""
        limit = warm.cached - warm.cached % self.chunk_tokens
        while not warm.settled:
            limit += self.chunk_tokens
            before = warm.usage
            await self._stream(warm, replace(warm.request, request_id=f"{warm.request.request_id}-{limit}",
                                             prompt_limit=limit))
            if warm.usage is before or warm.usage is None or warm.usage.prompt_tokens != limit:
                return  # the whole prompt is in (it was shorter than the limit), or the engine took it all

    async def _stream(self, warm: Warm, request: LLMRequest) -> None:
        warm.current = request.request_id
        async for chunk in self.engine.stream(request):
            if chunk.finish_reason == "abort":
                warm.aborted = True
                return
            warm.chunks.append(chunk)
            warm.usage = chunk.usage or warm.usage
            warm.arrived.set()

    async def settle(self, warm: Warm, real: str) -> Warm | None:
        """Compare the guess with the real observation; a provisional step is returned to be adopted."""
        matched = real == warm.predicted
        warm.settled = True
        warmed = warm.usage.prompt_tokens if warm.usage is not None else None
        self.emit(SpecObsSettle(self.now(), warm.step, warm.call_id, matched, warmed))
        if matched and warm.provisional and not warm.aborted:  # an aborted step's answer is cut short
            return warm
        # A right guess's chunk in flight is dropped too: its blocks are cached as it is scheduled, and a
        # chunk still waiting would only compute the real request's own tokens beside it.
        await self.drop(warm)
        return None

    async def drop(self, warm: Warm) -> None:
        """Abort a warm request and forget its tokens."""
        warm.settled = True
        if not warm.done:
            await self.engine.abort(warm.current)
        if warm.task is not None:
            warm.task.cancel()
            await asyncio.gather(warm.task, return_exceptions=True)

    async def adopt(self, warm: Warm) -> AsyncIterator[Chunk]:
        """The provisional step's stream: the chunks already produced, then the rest as they come."""
        index = 0
        while True:
            while index < len(warm.chunks):
                yield warm.chunks[index]
                index += 1
            if warm.done and warm.aborted:  # a co-scheduler may abort speculative requests; no entry point
                # combines one with provisional steps, and a cut answer must never pass for a whole one
                raise EngineError(f"the provisional step {warm.current} was aborted after it was adopted; "
                                  "run without --provisional")
            if warm.done:
                return
            warm.arrived.clear()
            await warm.arrived.wait()

    async def close(self) -> None:
        """Abort what is still warming (the session ended)."""
        for warm in list(self._live.values()):
            await self.drop(warm)
