"""The co-scheduler in front of the real vLLM engine: a speculative prefill never delays an authoritative request.

Four sessions share the engine through a Pacing co-scheduler with room for two requests. Two sessions
send cache-warming prefills (speculative) while the engine is idle; then two sessions send real
requests. The records must show the speculation admitted only while no real request waited, aborted
as soon as real requests had to wait, and a late speculation admitted only after every real request.
Only orderings and admission facts are asserted, never a time.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from harness.coscheduler import CoScheduler, Pacing, Record
from harness.engine.api import Chunk, LLMRequest
from harness.speculation.running.observation import WARM_PRIORITY

pytestmark = pytest.mark.engine

NOTES = "".join(f"Note {i}: the function handler_{i} doubles its input and logs it.\n" for i in range(60))


def warm_request(rid: str) -> LLMRequest:
    """A prefill of a long guessed observation, one output token: what session warm-ups send."""
    messages = [{"role": "system", "content": f"Session {uuid.uuid4().hex}.\n{NOTES}"},
                {"role": "user", "content": "Read the notes."}]
    return LLMRequest(rid, messages, max_tokens=1, priority=WARM_PRIORITY)


def real_request(rid: str) -> LLMRequest:
    return LLMRequest(rid, [{"role": "user", "content": f"Say hello ({rid})."}], max_tokens=4)


async def drain(cosched: CoScheduler, session: str, req: LLMRequest, after: asyncio.Event | None = None) -> Chunk:
    if after is not None:
        await after.wait()
    last = Chunk()
    async for chunk in cosched.engine_for(session).stream(req):
        last = chunk
    return last


async def test_speculative_prefills_never_delay_authoritative_requests(vllm_engine) -> None:
    cosched = CoScheduler(vllm_engine, Pacing(knee=2, kv_tokens=40_000, max_wait=1e6))
    tag = uuid.uuid4().hex[:6]
    warm_ids, real_ids, late_id = [f"w{i}-{tag}" for i in (1, 2)], [f"a{i}-{tag}" for i in (3, 4)], f"w5-{tag}"
    warmed, reals_in = asyncio.Event(), asyncio.Event()

    async def sequence() -> list[Chunk]:
        tasks = [asyncio.create_task(drain(cosched, f"s{1 + i}", warm_request(rid))) for i, rid in enumerate(warm_ids)]
        # both speculations admitted (at once: the engine is idle); the real ones follow within a loop turn, as
        # a prefill that ended first would never be aborted: no sleeping between (a poll every 10 ms left it 10 ms)
        while sum(r.action == "admit" for r in cosched.records) < 2:
            await asyncio.sleep(0)
        warmed.set()
        reals = [asyncio.create_task(drain(cosched, f"s{3 + i}", real_request(rid), warmed))
                 for i, rid in enumerate(real_ids)]
        while sum(r.action == "arrive" and not r.speculative for r in cosched.records) < 2:
            await asyncio.sleep(0)
        reals_in.set()
        late = asyncio.create_task(drain(cosched, "s5", warm_request(late_id), reals_in))
        return await asyncio.gather(*tasks, *reals, late)

    ends = dict(zip([*warm_ids, *real_ids, late_id], await asyncio.wait_for(sequence(), 300)))
    records: list[Record] = cosched.records

    def first(action: str, rid: str) -> int:
        return next(i for i, r in enumerate(records) if r.action == action and r.request_id == rid)

    for record in records:  # speculation is admitted only while no real request waits
        if record.action == "admit" and record.speculative:
            assert record.waiting_authoritative == 0, records
    for rid in warm_ids:  # the running speculations gave way the moment real requests had to wait
        assert [r.action for r in records if r.request_id == rid] == ["arrive", "admit", "abort", "end"]
        assert ends[rid].finish_reason == "abort"
        assert first("arrive", real_ids[0]) < first("abort", rid) < min(first("admit", a) for a in real_ids)
    for rid in real_ids:  # real requests ran to the end, admitted before the late speculation
        assert ends[rid].finish_reason in ("stop", "length") and ends[rid].usage.output_tokens >= 1
        assert first("admit", rid) < first("admit", late_id)
    assert ends[late_id].finish_reason in ("stop", "length")  # it ran once nobody waited
    assert vllm_engine._llm.get_num_unfinished_requests() == 0


async def test_a_request_sent_around_the_co_scheduler_holds_its_place_at_the_knee(vllm_engine) -> None:
    """The engine's own counts show a client that bypasses the co-scheduler (a single `tao run` on the same
    engine): with room for one request, a session's request waits for that client's to end, then goes.

    The other client's request cannot end by itself while the test watches (no end of text, a budget of minutes);
    it ends when the test aborts it, once the session's request has arrived and was held. Ending it by its budget
    raced: the co-scheduler's recheck could see the engine empty before the other client's reader resumed."""
    cosched = CoScheduler(vllm_engine, Pacing(knee=1, kv_tokens=40_000, max_wait=1e6))
    tag = uuid.uuid4().hex[:6]
    other = LLMRequest(f"other-{tag}", [{"role": "user", "content": "Tell a long story."}], max_tokens=4000)
    mine = f"mine-{tag}"
    streaming = asyncio.Event()
    loop = asyncio.get_running_loop()

    def recorded(action: str) -> list[Record]:
        return [r for r in cosched.records if r.request_id == mine and r.action == action]

    async def straight() -> tuple[float | None, Chunk]:
        ended, last = None, Chunk()
        async for chunk in vllm_engine.stream(other, ignore_eos=True):
            last = chunk
            streaming.set()
            if ended is None and recorded("arrive"):  # the session's request came: the other client goes away
                ended = loop.time()
                await vllm_engine.abort(other.request_id)
        return ended, last

    async def session() -> Chunk:
        await streaming.wait()
        return await drain(cosched, "s1", real_request(mine))

    (other_ended, other_last), last = await asyncio.wait_for(asyncio.gather(straight(), session()), 300)
    [arrive], [admit] = recorded("arrive"), recorded("admit")
    assert other_last.finish_reason == "abort" and other_ended is not None
    assert arrive.t <= other_ended <= admit.t  # held while the other client's request ran, admitted after it
    assert last.finish_reason in ("stop", "length")
    assert vllm_engine._llm.get_num_unfinished_requests() == 0
