"""Warm prefills go in chunks, so a real request waits behind one chunk at most (running/observation.py).

The simulated engine runs on the virtual clock: a step cannot be pre-empted, as on vLLM's CPU engine,
and its duration follows the tokens it computes, so the times below are the simulation's arithmetic.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from harness.engine.api import Chunk, LLMRequest, Usage
from harness.engine.sim import Profile, SimEngine, StepModel
from harness.events import Event, SpecObsSettle
from harness.speculation.running.observation import WARM_PRIORITY, ObservationSpeculator
from tests.helpers import virtual

# 10 ms a prefill token, one character a token: a 256-token chunk is a 2.56 s step.
SLOW_PREFILL = Profile("slow-prefill", StepModel(base=0.0, per_seq=0.01, per_token=0.01, per_decode_pair=0.0,
                                                 per_prefill_pair=0.0),
                       kv_tokens=65_536, block_size=16, max_seqs=8, max_batched_tokens=8_192, max_model_len=16_384,
                       chars_per_token=1.0)
HISTORY = [{"role": "system", "content": "You fix bugs. " * 40}, {"role": "user", "content": "Run the tests."}]
GUESS = "".join(f"tests/test_{i:03}.py::test_case FAILED\n" for i in range(40))  # about 1,300 tokens


class Recorder:
    """The simulated engine, with every request, its final usage and every abort written down."""

    def __init__(self, inner: SimEngine) -> None:
        self.inner, self.name, self.native_tools, self.prefix_cache = inner, inner.name, False, True
        self.requests: list[LLMRequest] = []
        self.usage: dict[str, Usage] = {}
        self.aborted: list[str] = []
        self.started = asyncio.Event()

    async def stream(self, request: LLMRequest) -> AsyncIterator[Chunk]:
        self.requests.append(request)
        self.started.set()
        async for chunk in self.inner.stream(request):
            if chunk.usage is not None:
                self.usage[request.request_id] = chunk.usage
            yield chunk

    async def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)
        await self.inner.abort(request_id)

    async def close(self) -> None:
        await self.inner.close()


def warm_messages(guess: str) -> list[dict[str, str]]:
    return [*HISTORY, {"role": "user", "content": f"<tool_result>\n{guess}\n</tool_result>"}]


def speculator(engine: Recorder, chunk_tokens: int = 256) -> tuple[ObservationSpeculator, list[Event]]:
    events: list[Event] = []
    return ObservationSpeculator(engine, events.append, lambda: 0.0, chunk_tokens=chunk_tokens), events


def test_a_warm_prefill_goes_in_chunks_each_starting_from_the_last() -> None:
    async def main() -> tuple[Recorder, int]:
        engine = Recorder(SimEngine(SLOW_PREFILL))
        spec, _ = speculator(engine)
        warm = spec.start(1, "c1", GUESS, warm_messages(GUESS), [], 64, cached=300)
        assert warm is not None
        await warm.task
        full = warm.usage.prompt_tokens if warm.usage else 0
        return engine, full

    engine, full = virtual(main)
    limits = [r.prompt_limit for r in engine.requests]
    assert limits[0] == 512  # the chunk past the 300 cached tokens, on a chunk boundary
    assert limits == list(range(512, 512 + 256 * len(limits), 256))
    assert limits[-2] < full <= limits[-1]  # the last chunk is the rest of the prompt
    assert all(r.priority == WARM_PRIORITY and r.max_tokens == 1 for r in engine.requests)
    for before, after in zip(engine.requests, engine.requests[1:]):  # each chunk finds the one before it cached
        assert engine.usage[after.request_id].cached_tokens >= before.prompt_limit - SLOW_PREFILL.block_size


def test_a_real_request_waits_behind_one_chunk_not_the_whole_warm_prefill() -> None:
    async def first_token_after_warming(chunk_tokens: int) -> float:
        engine = Recorder(SimEngine(SLOW_PREFILL))
        spec, _ = speculator(engine, chunk_tokens)
        warm = spec.start(1, "c1", GUESS, warm_messages(GUESS), [], 64)
        assert warm is not None
        await engine.started.wait()
        await asyncio.sleep(1.0)  # the tool ends while a warm step runs, with another output
        await spec.settle(warm, "1 passed\n")
        loop = asyncio.get_running_loop()
        sent = loop.time()
        async for chunk in engine.stream(LLMRequest("real", warm_messages("1 passed\n"), max_tokens=1)):
            if chunk.text:
                return loop.time() - sent
        raise AssertionError("the real request produced no token")

    chunked = virtual(lambda: first_token_after_warming(256))
    whole = virtual(lambda: first_token_after_warming(100_000))
    own = SLOW_PREFILL.step.prefill_seconds(len(str(warm_messages("1 passed\n")))) + 1  # its own prefill, generously
    assert chunked <= 256 * 0.01 + own  # at most the rest of one 2.56 s chunk, then its own prefill
    assert whole > chunked + 5  # the whole guess (about 13 s) as one step holds it far longer


def test_settling_stops_warming_and_drops_the_chunk_in_flight() -> None:
    async def main(real: str) -> tuple[Recorder, list[Event]]:
        engine = Recorder(SimEngine(SLOW_PREFILL))
        spec, events = speculator(engine)
        warm = spec.start(1, "c1", GUESS, warm_messages(GUESS), [], 64)
        assert warm is not None
        while len(engine.requests) < 2:  # the second chunk is in flight
            await asyncio.sleep(0.1)
        await spec.settle(warm, real)
        await asyncio.gather(warm.task, return_exceptions=True)
        await spec.close()
        return engine, events

    engine, events = virtual(lambda: main("1 passed\n"))
    assert [r.prompt_limit for r in engine.requests] == [256, 512]  # no chunk started after the settle
    assert engine.aborted == [engine.requests[1].request_id]
    [settle] = [e for e in events if isinstance(e, SpecObsSettle)]
    assert not settle.matched and settle.warmed_tokens == 256  # the first chunk had finished

    engine, events = virtual(lambda: main(GUESS))
    assert [r.prompt_limit for r in engine.requests] == [256, 512]  # the real request takes over from here
    assert engine.aborted == [engine.requests[1].request_id]
    [settle] = [e for e in events if isinstance(e, SpecObsSettle)]
    assert settle.matched and settle.warmed_tokens == 256


def test_a_provisional_step_the_engine_aborted_is_never_adopted() -> None:
    """A co-scheduler may abort speculative requests: a cut-short answer must not pass for the model's."""
    async def main() -> tuple[object, list[LLMRequest]]:
        engine = Recorder(SimEngine(SLOW_PREFILL))
        events: list[Event] = []
        spec = ObservationSpeculator(engine, events.append, lambda: 0.0, provisional=True)
        warm = spec.start(1, "c1", GUESS, warm_messages(GUESS), [], 64)
        assert warm is not None and warm.request.max_tokens == 64
        await engine.started.wait()
        await engine.inner.abort(warm.current)  # as the co-scheduler does, behind the speculator's back
        await asyncio.gather(warm.task, return_exceptions=True)
        adopted = await spec.settle(warm, GUESS)  # the guess was right, but the step was cut
        return adopted, engine.requests

    adopted, requests = virtual(main)
    assert adopted is None
    assert [r.prompt_limit for r in requests] == [None]  # a provisional step is one whole request
