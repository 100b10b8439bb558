"""The co-scheduler in front of the simulated engine, on the virtual clock: what it admits, when, and in what order.

The policies' rules are tested on hand-made views in test_cosched_policy.py; here the same rules are
checked on what the CoScheduler actually did (its records) while real streams ran through it.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace

from harness.coscheduler import FCFS, CoScheduler, Decision, Pacing, Record, View
from harness.engine.api import Chunk, LLMRequest
from harness.engine.sim import SimEngine
from harness.speculation.running.observation import WARM_PRIORITY
from tests.helpers import flat_profile, virtual

FLAT = flat_profile(kv_tokens=16_384, block_size=16, max_seqs=64, max_batched_tokens=4_096, max_model_len=8_192)


def request(rid: str, tokens: int = 5, priority: int = 0) -> LLMRequest:
    return LLMRequest(rid, [{"role": "user", "content": f"task {rid}"}], max_tokens=tokens, priority=priority)


async def drain(cosched: CoScheduler, session: str, req: LLMRequest, delay: float = 0.0) -> Chunk:
    """Send one request through a session's engine after `delay` seconds; its final chunk."""
    await asyncio.sleep(delay)
    last = Chunk()
    async for chunk in cosched.engine_for(session).stream(req):
        last = chunk
    return last


def in_flight(records: list[Record]) -> list[int]:
    """Requests admitted and not yet ended, after each record."""
    count, out = 0, []
    for record in records:
        count += {"admit": 1, "end": -1}.get(record.action, 0)
        out.append(count)
    return out


def actions(records: list[Record], request_id: str) -> list[str]:
    return [r.action for r in records if r.request_id == request_id]


def test_fcfs_admits_every_request_on_arrival() -> None:
    async def main() -> list[Record]:
        cosched = CoScheduler(SimEngine(FLAT), FCFS())
        await asyncio.gather(*(drain(cosched, f"s{i}", request(f"r{i}")) for i in range(10)))
        return cosched.records

    records = virtual(main)
    arrivals = [r for r in records if r.action == "arrive"]
    assert len(arrivals) == 10
    for record in arrivals:
        index = records.index(record)
        assert records[index + 1].action == "admit" and records[index + 1].request_id == record.request_id


def test_pacing_keeps_requests_in_flight_at_the_knee_and_finishes_everyone() -> None:
    async def main() -> tuple[list[Record], list[Chunk]]:
        cosched = CoScheduler(SimEngine(FLAT), Pacing(knee=3, kv_tokens=FLAT.kv_tokens, max_wait=1_000.0))
        ends = await asyncio.gather(*(drain(cosched, f"s{i}", request(f"r{i}")) for i in range(10)))
        return cosched.records, ends

    records, ends = virtual(main)
    assert max(in_flight(records)) == 3
    assert all(end.finish_reason == "length" for end in ends)
    assert sum(r.action == "end" for r in records) == 10


def test_an_aged_request_is_next_in_line_but_waits_for_room_at_the_knee() -> None:
    async def main() -> list[Record]:
        cosched = CoScheduler(SimEngine(FLAT), Pacing(knee=1, kv_tokens=FLAT.kv_tokens, max_wait=20.0))
        await drain(cosched, "s1", request("s1-a"))  # both sessions have started; s2 is further along,
        await drain(cosched, "s2", request("s2-a"))  # so it ranks first unless s1 has waited its bound
        await drain(cosched, "s2", request("s2-b"))
        await asyncio.gather(drain(cosched, "long", request("long", tokens=200)),
                             drain(cosched, "s1", request("s1-b"), delay=1.0),
                             drain(cosched, "s2", request("s2-c"), delay=30.0))
        return cosched.records

    records = virtual(main)
    admits = [r.request_id for r in records if r.action == "admit"]
    assert admits[-3:] == ["long", "s1-b", "s2-c"]  # aged s1-b overtakes s2-c, which ranks higher
    s1_admit = next(r for r in records if r.request_id == "s1-b" and r.action == "admit")
    long_end = next(r for r in records if r.request_id == "long" and r.action == "end")
    assert s1_admit.t >= long_end.t  # not over the knee: it waited for the running request to end


def test_speculative_prefills_wait_for_authoritative_ones_and_give_way_to_them() -> None:
    async def main() -> tuple[list[Record], dict[str, Chunk]]:
        cosched = CoScheduler(SimEngine(FLAT), Pacing(knee=2, kv_tokens=FLAT.kv_tokens, max_wait=1_000.0))
        jobs = {"warm-1": drain(cosched, "s1", request("warm-1", 50, WARM_PRIORITY)),
                "warm-2": drain(cosched, "s2", request("warm-2", 50, WARM_PRIORITY)),
                "auth-3": drain(cosched, "s3", request("auth-3", 5), delay=3.0),
                "auth-4": drain(cosched, "s4", request("auth-4", 5), delay=3.0),
                "warm-5": drain(cosched, "s5", request("warm-5", 1, WARM_PRIORITY), delay=4.0),
                "auth-6": drain(cosched, "s6", request("auth-6", 5), delay=5.0)}
        ends = await asyncio.gather(*jobs.values())
        return cosched.records, dict(zip(jobs, ends))

    records, ends = virtual(main)
    assert actions(records, "warm-1") == ["arrive", "admit", "abort", "end"]  # ran while the engine was idle
    assert ends["warm-1"].finish_reason == ends["warm-2"].finish_reason == "abort"
    assert all(ends[a].finish_reason == "length" for a in ("auth-3", "auth-4", "auth-6"))
    for record in records:
        if record.action == "admit" and record.speculative:
            assert record.waiting_authoritative == 0
    warm_admit = next(r for r in records if r.request_id == "warm-5" and r.action == "admit")
    auth_admits = [r for r in records if r.action == "admit" and not r.speculative and r.request_id != "warm-5"]
    assert all(a.t <= warm_admit.t for a in auth_admits)  # the late speculation went after every real request


def test_a_waiting_request_given_up_by_its_session_never_reaches_the_engine() -> None:
    async def main() -> tuple[list[Record], SimEngine]:
        engine = SimEngine(FLAT)
        cosched = CoScheduler(engine, Pacing(knee=1, kv_tokens=FLAT.kv_tokens, max_wait=1_000.0))
        first = asyncio.create_task(drain(cosched, "s1", request("busy", 20)))
        await asyncio.sleep(1.0)
        waiting = asyncio.create_task(drain(cosched, "s2", request("gone")))
        await asyncio.sleep(1.0)
        await cosched.engine_for("s2").abort("gone")
        await asyncio.gather(first, waiting)
        return cosched.records, engine

    records, engine = virtual(main)
    assert actions(records, "gone") == ["arrive", "drop"]
    assert sum(1 for r in records if r.action == "admit") == 1
    assert engine.stats.output_tokens == 20  # only the busy request ran


def test_finished_requests_teach_the_scheduler_each_sessions_progress() -> None:
    async def main() -> dict[str, int]:
        cosched = CoScheduler(SimEngine(replace(FLAT, chars_per_token=1.0)), FCFS())
        for step in range(3):
            await drain(cosched, "s1", request(f"s1-{step}", 4))
        await drain(cosched, "s2", request("s2-0", 4, WARM_PRIORITY))  # speculation is not progress
        return {s: p.steps for s, p in cosched.sessions.items()}

    assert virtual(main) == {"s1": 3}


def test_a_warm_chunk_counts_only_its_own_prompt_tokens() -> None:
    """The policy weighs KV pinned by running requests: a chunk of a warm prefill pins its limit, not the prompt."""
    class Seen(FCFS):
        def __init__(self) -> None:
            self.tickets: dict[str, int] = {}

        def decide(self, view: View) -> Decision:
            self.tickets.update((t.request_id, t.prompt_tokens) for t in view.waiting)
            return super().decide(view)

    long_prompt = [{"role": "user", "content": "x" * 3_400}]  # about 1,000 tokens by the estimate

    async def main() -> dict[str, int]:
        policy = Seen()
        cosched = CoScheduler(SimEngine(FLAT), policy)
        whole = LLMRequest("whole", long_prompt, max_tokens=1, priority=WARM_PRIORITY)
        await drain(cosched, "s1", whole)
        await drain(cosched, "s2", replace(whole, request_id="chunk", prompt_limit=256))
        return policy.tickets

    tickets = virtual(main)
    assert tickets["whole"] == 1_000 and tickets["chunk"] == 256


def test_requests_sent_straight_to_the_engine_take_their_place_at_the_knee() -> None:
    """A client that bypasses the co-scheduler (a single `tao run` on the same engine) is seen in the
    engine's own counts: with the knee at 2 and two such requests running, a session's request waits for
    one of them to end."""
    async def straight(engine: SimEngine, req: LLMRequest) -> None:
        async for _ in engine.stream(req):
            pass

    async def main() -> tuple[list[Record], list[float]]:
        engine = SimEngine(FLAT)
        cosched = CoScheduler(engine, Pacing(knee=2, kv_tokens=FLAT.kv_tokens, max_wait=1_000.0))
        ended: list[float] = []

        async def other(rid: str) -> None:
            await straight(engine, request(rid, tokens=100))
            ended.append(asyncio.get_running_loop().time())

        await asyncio.gather(other("other-1"), other("other-2"), drain(cosched, "s1", request("mine"), delay=0.5))
        return cosched.records, ended

    records, ended = virtual(main)
    admit = next(r for r in records if r.request_id == "mine" and r.action == "admit")
    arrive = next(r for r in records if r.request_id == "mine" and r.action == "arrive")
    assert admit.t > arrive.t  # it did not go straight in
    assert admit.t >= min(ended)  # it went in once the other client's first request was over


def test_pacing_state_says_admitted_or_waiting_at_which_place() -> None:
    """What a status bar reads: one request runs (room for one), the next two wait in arrival order."""
    async def main() -> list[tuple[str, object]]:
        cosched = CoScheduler(SimEngine(FLAT), Pacing(knee=1, kv_tokens=16_384, max_wait=1e6))
        tasks = [asyncio.create_task(drain(cosched, f"s{i}", request(f"r{i}", tokens=50))) for i in range(3)]
        await asyncio.sleep(0.001)
        states = [(s, cosched.pacing(s)) for s in ("s0", "s1", "s2", "idle")]
        await asyncio.gather(*tasks)
        return states

    states = dict(virtual(main))
    assert states["s0"].admitted and states["s0"].position is None and states["s0"].waited is None
    assert not states["s1"].admitted and states["s1"].position == 1 and states["s1"].waited is not None
    assert states["s2"].position == 2 and states["s0"].sessions == 3
    assert not states["idle"].admitted and states["idle"].position is None


def test_a_sessions_return_is_expected_from_its_hint_else_from_the_gaps_observed() -> None:
    async def main() -> tuple[float | None, float | None, float | None, float | None]:
        cosched = CoScheduler(SimEngine(FLAT), FCFS())
        await drain(cosched, "s", request("r1"))
        nothing_seen = cosched.sessions["s"].expected_return()
        await drain(cosched, "s", request("r2"), delay=4.0)  # a 4 s tool between the two requests
        ended = cosched.sessions["s"].ended_at
        observed = cosched.sessions["s"].expected_return()
        cosched.tool_started("s", expected=30.0)
        hinted = cosched.sessions["s"].expected_return()
        return nothing_seen, observed, hinted, ended

    nothing_seen, observed, hinted, ended = virtual(main)
    assert nothing_seen is None and ended is not None
    assert observed is not None and abs(observed - ended - 4.0) < 0.5  # the gap, measured on the virtual clock
    assert hinted is not None and hinted > observed + 20  # the hint overrides the gaps


def test_the_scheduler_counts_each_sessions_attained_service_and_hears_when_it_ends() -> None:
    async def main() -> tuple[int, int, int, float | None, bool]:
        cosched = CoScheduler(SimEngine(replace(FLAT, chars_per_token=1.0)), FCFS())
        first = await drain(cosched, "s", request("r1", 4))
        after_one = cosched.sessions["s"].attained
        second = await drain(cosched, "s", request("r2", 4), delay=2.0)
        assert first.usage is not None and second.usage is not None
        computed = sum(u.prompt_tokens - u.cached_tokens + u.output_tokens for u in (first.usage, second.usage))
        cosched.session_ended("s")
        progress = cosched.sessions["s"]
        return after_one, progress.attained, computed, progress.last_gap, progress.finished

    after_one, attained, computed, gap, finished = virtual(main)
    assert 0 < after_one < attained == computed  # uncached prompt tokens and output tokens, both requests
    assert gap is not None and abs(gap - 2.0) < 0.5 and finished


def test_a_waiting_reader_cancelled_before_its_stream_ends_is_dropped_not_admitted() -> None:
    """Task.cancel() cancels the admission future at once; a decision in the same loop turn must skip it."""
    async def main() -> list[Record]:
        cosched = CoScheduler(SimEngine(FLAT), Pacing(knee=1, kv_tokens=16_384, max_wait=1e6))
        running = asyncio.create_task(drain(cosched, "s0", request("r0", tokens=50)))
        waiting = asyncio.create_task(drain(cosched, "s1", request("r1")))
        await asyncio.sleep(0.001)
        cosched.policy = FCFS()  # the next decision admits whatever waits
        waiting.cancel()
        cosched.tool_started("s0", expected=None)  # a decision before the cancelled task resumes
        await running
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        return cosched.records

    records = virtual(main)
    assert actions(records, "r1") == ["arrive", "drop"]
    assert actions(records, "r0") == ["arrive", "admit", "end"]
