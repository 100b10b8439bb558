"""The simulated engine (harness.engine.sim) and the virtual clock it runs on (harness.bench.vclock).

Every test runs on the virtual clock: simulated steps take no real time, and the times read from the
loop are virtual, so asserting them asserts the simulation's arithmetic, not this machine's speed.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import replace
from typing import Any

from harness.engine.api import Chunk, LLMRequest
from harness.engine.sim import GPU, SimEngine
from tests.helpers import flat_profile, virtual

# One second a step, whatever it computes: step counts read straight off the clock.
FLAT = flat_profile(kv_tokens=4_096, block_size=16, max_seqs=8, max_batched_tokens=2_048, max_model_len=4_096)


def request(rid: str, prompt: str, answer: str | None = None, priority: int = 0, max_tokens: int = 4,
            history: list[dict[str, Any]] | None = None) -> LLMRequest:
    messages = [*(history or []), {"role": "user", "content": prompt}]
    return LLMRequest(rid, messages, max_tokens=max_tokens, priority=priority, force=answer)


async def drain(engine: SimEngine, req: LLMRequest) -> tuple[str, Chunk, float]:
    """The whole answer, the final chunk, and the (virtual) time it ended."""
    text, last = "", Chunk()
    async for chunk in engine.stream(req):
        text += chunk.text
        last = chunk
    return text, last, asyncio.get_running_loop().time()


def test_virtual_clock_jumps_to_the_next_timer() -> None:
    async def main() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        start = loop.time()
        await asyncio.sleep(3_600)
        return start, loop.time()

    began = time.monotonic()
    start, end = virtual(main)
    assert end - start == 3_600
    assert time.monotonic() - began < 60  # an hour of virtual time is not waited for


def test_virtual_clock_keeps_timer_order_and_stops_for_threads() -> None:
    async def main() -> tuple[list[str], float]:
        loop = asyncio.get_running_loop()
        order: list[str] = []

        async def after(seconds: float, name: str) -> None:
            await asyncio.sleep(seconds)
            order.append(name)

        start = loop.time()
        await asyncio.gather(after(30, "c"), after(10, "a"), after(20, "b"))
        before_thread = loop.time()
        await asyncio.to_thread(time.sleep, 0.2)  # real work in a thread takes no virtual time
        return order, (before_thread - start, loop.time() - before_thread)

    order, (slept, thread) = virtual(main)
    assert order == ["a", "b", "c"] and slept == 30
    assert thread < 0.2  # the clock did not run ahead while the thread worked


def test_virtual_clock_stops_for_a_subprocess() -> None:
    """A real process is real work: its output arrives before a virtual timeout, however slow the machine."""
    async def main() -> tuple[bytes, float]:
        loop = asyncio.get_running_loop()
        start = loop.time()
        process = await asyncio.create_subprocess_exec(sys.executable, "-c",
                                                       "import time; time.sleep(0.3); print('out')",
                                                       stdout=asyncio.subprocess.PIPE)
        out, _ = await asyncio.wait_for(process.communicate(), timeout=5)
        return out, loop.time() - start

    out, took = virtual(main)
    assert out.strip() == b"out"
    assert took < 5  # the timeout never fired: the clock did not run ahead while the process worked


def test_virtual_clock_fires_timers_far_into_virtual_time() -> None:
    """Past 2**24 s a nanosecond is below the clock's float resolution; timers there must still fire."""
    async def main() -> float:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(3e7)
        await asyncio.wait_for(asyncio.sleep(1.0), timeout=60.0)
        return loop.time()

    assert virtual(main) >= 3e7 + 1.0


def test_a_forced_answer_is_streamed_exactly_with_its_usage() -> None:
    async def main() -> tuple[str, Chunk]:
        engine = SimEngine(FLAT)
        text, last, _ = await drain(engine, request("a", "hello there", answer="the exact answer"))
        return text, last

    text, last = virtual(main)
    assert text == "the exact answer" and last.finish_reason == "stop"
    assert last.usage is not None and last.usage.output_tokens == len("the exact answer")
    assert last.usage.cached_tokens == 0


def test_concurrent_requests_share_steps() -> None:
    async def main() -> tuple[int, int]:
        alone = SimEngine(FLAT)
        await drain(alone, request("a", "first prompt", max_tokens=10))
        together = SimEngine(FLAT)
        await asyncio.gather(*(drain(together, request(f"r{i}", f"prompt {i}", max_tokens=10)) for i in range(6)))
        return alone.stats.steps, together.stats.steps

    alone, together = virtual(main)
    assert together == alone  # six sequences decode in the same steps as one


def test_a_step_takes_the_step_models_time() -> None:
    async def main() -> tuple[float, float]:
        engine = SimEngine(GPU)
        _, last, end = await drain(engine, request("a", "x" * 3_360, max_tokens=1))
        return end, engine.stats.busy_seconds

    end, busy = virtual(main)
    expected = GPU.step.prefill_seconds(1_000 + 4)  # 3,360 characters at 3.36 a token, plus the role markers
    assert abs(busy - expected) / expected < 0.01 and end == busy


def test_a_follow_up_prompt_finds_its_prefix_in_the_cache() -> None:
    async def main() -> tuple[int, int, int]:
        engine = SimEngine(FLAT)
        prompt = "describe the repository layout " * 20
        _, first, _ = await drain(engine, request("a", prompt, answer="it has a src folder and tests " * 4))
        history = [{"role": "user", "content": prompt},
                   {"role": "assistant", "content": "it has a src folder and tests " * 4}]
        _, second, _ = await drain(engine, request("b", "and the tests?", history=history, max_tokens=1))
        _, other, _ = await drain(engine, request("c", "something else entirely " * 20, max_tokens=1))
        return first.usage.prompt_tokens, second.usage.cached_tokens, other.usage.cached_tokens

    first_prompt, cached, other = virtual(main)
    assert cached >= first_prompt - FLAT.block_size  # the earlier prompt (and answer) came from the cache
    assert other == 0


def test_evicted_prefixes_are_not_hits() -> None:
    small = replace(FLAT, kv_tokens=512)

    async def main() -> int:
        engine = SimEngine(small)
        prompt = "a prompt that will be evicted " * 10
        await drain(engine, request("a", prompt, max_tokens=1))
        for i in range(4):  # fill the cache with other prompts
            await drain(engine, request(f"f{i}", f"filler number {i} " * 25, max_tokens=1))
        _, again, _ = await drain(engine, request("b", prompt, max_tokens=1))
        return again.usage.cached_tokens

    assert virtual(main) == 0


def test_lower_priority_numbers_run_first() -> None:
    one_at_a_time = replace(FLAT, max_seqs=1)

    async def main() -> list[str]:
        engine = SimEngine(one_at_a_time)
        ends: list[tuple[float, str]] = []

        async def run(rid: str, priority: int) -> None:
            _, _, end = await drain(engine, request(rid, f"prompt {rid}", priority=priority, max_tokens=3))
            ends.append((end, rid))

        await asyncio.gather(run("late", 5), run("first", 0), run("middle", 2))
        return [rid for _, rid in sorted(ends)]

    assert virtual(main) == ["first", "middle", "late"]


def test_kv_pressure_preempts_the_lowest_priority_and_everyone_still_finishes() -> None:
    tight = replace(FLAT, kv_tokens=320)  # 20 blocks; three requests growing to ~130 tokens each do not fit

    async def main() -> tuple[list[tuple[str, str]], int, SimEngine]:
        engine = SimEngine(tight)
        answers = {f"r{i}": f"answer {i} " * 12 for i in range(3)}
        results = await asyncio.gather(*(drain(engine, request(rid, f"question {rid} " * 4, answer=text, priority=i))
                                         for i, (rid, text) in enumerate(answers.items())))
        return [(text, answers[f"r{i}"]) for i, (text, _, _) in enumerate(results)], engine.stats.preemptions, engine

    pairs, preemptions, engine = virtual(main)
    assert preemptions > 0
    assert all(got == want for got, want in pairs)  # a recomputed request still streams its answer once
    assert engine.kv_usage() == 0 and not engine.running and not engine.waiting


def test_abort_ends_the_stream_and_frees_the_cache() -> None:
    async def main() -> tuple[str | None, float]:
        engine = SimEngine(FLAT)
        req = request("long", "go", max_tokens=1_000)

        async def stop_soon() -> None:
            await asyncio.sleep(5.5)
            await engine.abort("long")

        results = await asyncio.gather(drain(engine, req), stop_soon())
        return results[0][1].finish_reason, engine.kv_usage()

    reason, usage = virtual(main)
    assert reason == "abort" and usage == 0


def test_knee_is_where_decode_stops_scaling() -> None:
    knee = GPU.knee(2_000)
    peak = GPU.step.decode_rate(GPU.kv_tokens // 2_000, 2_000)
    assert 1 < knee < GPU.kv_tokens // 2_000
    assert GPU.step.decode_rate(knee, 2_000) >= 0.8 * peak > GPU.step.decode_rate(knee - 1, 2_000)
