"""Observation speculation and KV pre-warming (AOSpec).

While a slow tool runs for real, its observation can often be guessed: a test re-run usually prints
what it printed last time. The engine then pre-fills the next prompt (history, the model's answer,
the guessed observation) at the lowest priority, so that when the real observation arrives and is
byte-identical, the next Think step starts from a warm prefix cache instead of prefilling it all.
When it differs, the warm request is aborted and the next prompt is built from the real output only:
nothing of the guess reaches the model.

With `provisional`, the guess goes further: the next Think step itself starts on the guessed
observation, and its tokens are kept only on an exact match (otherwise aborted and discarded).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from harness.engine.base import Chunk, Engine, LLMRequest, Usage
from harness.errors import EngineError
from harness.events import Event, SpecObsSettle, SpecObsWarm

WARM_PRIORITY = 1_000  # vLLM runs lower numbers first: warming waits behind every real request


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


class ObservationSpeculator:
    """Starts warm requests on guessed observations and settles them against the real ones."""

    def __init__(self, engine: Engine, emit: Callable[[Event], None], now: Callable[[], float],
                 provisional: bool = False) -> None:
        self.engine, self.emit, self.now, self.provisional = engine, emit, now, provisional
        self._live: dict[str, Warm] = {}
        self._count = 0

    @property
    def enabled(self) -> bool:
        """Warming needs an engine whose prefix cache a prefill request fills."""
        return bool(getattr(self.engine, "prefix_cache", False))

    def start(self, step: int, call_id: str, predicted: str, messages: list[dict[str, Any]],
              tools: list[dict[str, Any]], max_tokens: int) -> Warm | None:
        """Pre-fill `messages` (ending with the guessed observation) while the real tool runs."""
        if not self.enabled:
            return None
        self._count += 1
        request = LLMRequest(f"warm-{self._count}-{call_id}", messages, tools if self.provisional else [],
                             max_tokens if self.provisional else 1, WARM_PRIORITY)
        warm = Warm(step, call_id, predicted, request, self.provisional)
        warm.task = asyncio.create_task(self._run(warm))
        self._live[request.request_id] = warm
        self.emit(SpecObsWarm(self.now(), step, call_id, "last_run", self.provisional, len(predicted)))
        return warm

    async def _run(self, warm: Warm) -> None:
        try:
            async for chunk in self.engine.stream(warm.request):
                warm.chunks.append(chunk)
                warm.usage = chunk.usage or warm.usage
                warm.arrived.set()
        except EngineError:
            pass  # a failed warm-up costs nothing; the real request reports the engine's state
        finally:
            warm.done = True
            warm.arrived.set()
            self._live.pop(warm.request.request_id, None)

    async def settle(self, warm: Warm, real: str) -> Warm | None:
        """Compare the guess with the real observation; a provisional step is returned to be adopted."""
        matched = real == warm.predicted
        warmed = warm.usage.prompt_tokens if warm.usage is not None and warm.done else None
        self.emit(SpecObsSettle(self.now(), warm.step, warm.call_id, matched, warmed))
        if not matched:
            await self.drop(warm)
            return None
        return warm if warm.provisional else None

    async def drop(self, warm: Warm) -> None:
        """Abort a warm request and forget its tokens."""
        if not warm.done:
            await self.engine.abort(warm.request.request_id)
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
            if warm.done:
                return
            warm.arrived.clear()
            await warm.arrived.wait()

    async def close(self) -> None:
        """Abort what is still warming (the session ended)."""
        for warm in list(self._live.values()):
            await self.drop(warm)
