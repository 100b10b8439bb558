"""The simulated engine's KV blocks (harness.engine.sim_kv, harness.engine.sim) behave as vLLM v1's KV manager.

Hand-made cases on the virtual clock: which block is evicted first, that only full blocks are hits, that a
waiting request needs room for its whole sequence, that preemption frees every block and the preempted
request prefills again (finding its own blocks while they last). No timing is asserted.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest

from harness.engine.api import Chunk, LLMRequest
from harness.engine.sim import SimEngine, render
from harness.engine.sim_kv import BlockPool
from harness.errors import EngineUnavailable
from tests.helpers import flat_profile, virtual

BLOCK = 4
TINY = flat_profile(kv_tokens=40 * BLOCK, block_size=BLOCK, max_seqs=8, max_batched_tokens=64, max_model_len=128)


class CharIds:
    """One token id a character: a stand-in tokenizer whose block boundaries a test can count by hand (these
    tests are about blocks, not about tokenization)."""

    def prompt_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        return [ord(c) for c in render(messages)]

    def answer_ids(self, text: str) -> list[int]:
        return [*(ord(c) for c in text), 0]  # 0: the end of turn


def request(rid: str, prompt: str, answer: str | None = None, max_tokens: int = 1, priority: int = 0,
            history: list[dict[str, Any]] | None = None) -> LLMRequest:
    messages = [*(history or []), {"role": "user", "content": prompt}]
    return LLMRequest(rid, messages, max_tokens=max_tokens, priority=priority, force=answer)


async def drain(engine: SimEngine, req: LLMRequest) -> tuple[str, Chunk]:
    text, last = "", Chunk()
    async for chunk in engine.stream(req):
        text += chunk.text
        last = chunk
    return text, last


def test_free_blocks_are_reused_least_recently_freed_first_and_a_request_tail_first() -> None:
    pool = BlockPool(4)
    assert pool.allocate(2)
    pool.cache([11, 12])  # request a: two full blocks
    assert pool.allocate(2)
    pool.cache([21])  # request b: one full block and a partial one
    pool.release([11, 12], 0)  # a ends: 12 (its tail) queues before 11
    pool.release([21], 1)  # then b: its partial block, then 21
    assert list(pool.free) [:2] == [12, 11] and pool.in_use() == 0
    assert pool.allocate(1) and not pool.is_cached(12) and pool.is_cached(11)  # the oldest freed goes first
    assert pool.lookup([11, 12, 21]) == [11]  # a miss ends the hit: the hashes chain
    assert pool.evicted == 1


def test_a_held_cached_block_leaves_the_free_queue_and_is_not_evicted() -> None:
    pool = BlockPool(2)
    assert pool.allocate(2)
    pool.cache([1, 2])
    pool.release([1, 2], 0)
    pool.hold([1])  # a new request hits block 1
    assert pool.evictable([1, 2]) == 1
    assert pool.allocate(1) and pool.is_cached(1) and not pool.is_cached(2)
    assert not pool.allocate(1)  # block 1 is held: nothing left to take


def test_content_cached_twice_keeps_one_block() -> None:
    pool = BlockPool(3)
    assert pool.allocate(1)
    pool.cache([7])
    assert pool.allocate(1)
    pool.cache([7])  # a second request computed the same block: it shares the cached one
    assert pool.refs[7] == 2 and pool.private == 0 and len(pool.free) == 2


def test_a_partial_block_is_not_a_cache_hit() -> None:
    async def main() -> tuple[int, int, int]:
        engine = SimEngine(TINY, CharIds())
        _, first = await drain(engine, request("a", "x" * 17))
        _, again = await drain(engine, request("b", "x" * 17))  # the same prompt
        return first.usage.prompt_tokens, again.usage.cached_tokens, len(engine.pool.refs) + len(engine.pool.free)

    prompt, cached, _ = virtual(main)
    assert cached == (prompt - 1) // BLOCK * BLOCK < prompt  # full blocks only, never the last token


def test_the_answer_blocks_are_hits_for_the_next_turn() -> None:
    async def main() -> tuple[int, int]:
        engine = SimEngine(TINY, CharIds())
        answer = "y" * 23
        _, first = await drain(engine, request("a", "q" * 9, answer=answer))
        history = [{"role": "user", "content": "q" * 9}, {"role": "assistant", "content": answer}]
        _, second = await drain(engine, request("b", "next", history=history))
        return first.usage.prompt_tokens + first.usage.output_tokens, second.usage.cached_tokens

    computed, cached = virtual(main)
    assert cached == (computed - 1) // BLOCK * BLOCK  # every full block of prompt and answer (its last token unwritten)


def test_a_waiting_request_waits_until_its_whole_sequence_fits() -> None:
    small = replace(TINY, kv_tokens=30 * BLOCK)

    async def main() -> tuple[bool, bool, str]:
        engine = SimEngine(small, CharIds())
        hog = asyncio.create_task(drain(engine, request("hog", "h" * 12, max_tokens=8)))  # 11 blocks, 13 at its end
        big = asyncio.create_task(drain(engine, request("big", "b" * 50)))  # 21 blocks; a first chunk would fit
        await asyncio.sleep(4.5)  # hog is decoding (one flat second a step)
        held_back = [r.request.request_id for r in engine.waiting] == ["big"]
        hog_running = [r.request.request_id for r in engine.running] == ["hog"]
        await hog
        _, last = await big
        return held_back, hog_running, last.finish_reason or ""

    held_back, hog_running, finish = virtual(main)
    assert held_back and hog_running and finish == "length"  # admitted once the hog had finished


def test_preemption_frees_every_block_and_the_request_prefills_again() -> None:
    tight = replace(TINY, kv_tokens=24 * BLOCK)  # two prompts of 9 blocks fit; two answers grown to 15 blocks do not

    async def main() -> SimEngine:
        engine = SimEngine(tight, CharIds())
        answers = ["first answer " * 2, "second answer " * 2]
        results = await asyncio.gather(*(drain(engine, request(f"r{i}", f"q{i}", answer=a, priority=i))
                                         for i, a in enumerate(answers)))
        assert [text for text, _ in results] == answers  # a recomputed request still streams its answer once
        return engine

    engine = virtual(main)
    assert engine.stats.preemptions > 0
    assert engine.stats.prefill_tokens > engine.stats.prompt_tokens - engine.stats.cached_tokens  # recomputed
    assert engine.pool.in_use() == 0 and len(engine.pool.free) == engine.pool.blocks


def test_the_preempted_request_is_the_lowest_priority_one() -> None:
    tight = replace(TINY, kv_tokens=24 * BLOCK)

    async def main() -> dict[str, int]:
        engine = SimEngine(tight, CharIds())
        counts: dict[str, int] = {}
        preempt = engine._preempt

        def counted(req: Any) -> None:
            counts[req.request.request_id] = counts.get(req.request.request_id, 0) + 1
            preempt(req)

        engine._preempt = counted  # type: ignore[method-assign]
        await asyncio.gather(drain(engine, request("later", "l", answer="later answer " * 2, priority=3)),
                             drain(engine, request("urgent", "u", answer="urgent answer " * 2, priority=0)))
        return counts

    assert set(virtual(main)) == {"later"}  # arrived first, but its priority number is the larger


def test_the_embedded_tokenizer_gives_each_turn_the_last_turns_tokens_as_its_prefix() -> None:
    """What the cache relies on: a prompt's ids plus its forced answer's ids begin the next turn's prompt."""
    from harness.bench.sim_tokens import embedded_chat_tokens

    try:
        tokens = embedded_chat_tokens()
    except (EngineUnavailable, OSError) as exc:
        pytest.skip(f"the embedded model is not installed: {exc}")
    first = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "List the files."}]
    answer = "THOUGHT: look first.\n\n```bash\nls -la src/\n```"
    second = [*first, {"role": "assistant", "content": answer}, {"role": "user", "content": "total 8\n-rw a.py"}]
    before = tokens.prompt_ids(first) + tokens.answer_ids(answer)
    assert tokens.prompt_ids(second)[:len(before)] == before
