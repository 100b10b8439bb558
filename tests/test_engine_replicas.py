"""Several engine endpoints (harness.engine.replicas): `--engine-url` repeated or from a file, the routing rule on
hand-made loads, and real gateways over the simulated engine on 127.0.0.1: a session's requests all reach one
replica, a new session goes to the least loaded one, plain servers (no load to read) get the fewest sessions,
and an unreachable or dead replica is named in the error."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from harness.cli import build_parser
from harness.coscheduler import FCFS, CoScheduler
from harness.engine.api import Engine, EngineLoad, LLMRequest
from harness.engine.replicas import ReplicaSet, choose, read_urls
from harness.engine.sim import Profile, SimEngine, StepModel
from harness.errors import EngineDied, EngineUnavailable, UsageError
from harness.flags import engine_options
from harness.gateway import build_app, serving


def profile(step: float) -> Profile:
    """A simulated engine whose every step takes `step` seconds, one character a token, a 1,000-token KV cache."""
    return Profile("flat", StepModel(step, 0.0, 0.0, 0.0, 0.0), kv_tokens=1000, block_size=10, chars_per_token=1.0)


def request(rid: str, chars: int = 20, max_tokens: int = 1) -> LLMRequest:
    return LLMRequest(rid, [{"role": "user", "content": "y" * chars}], max_tokens=max_tokens)


async def drain(engine: Engine, req: LLMRequest) -> None:
    async for _ in engine.stream(req):
        pass


async def until(condition: Callable[[], bool]) -> None:
    """Wait (for real, without a deadline: pytest's timeout is the bound) until `condition` holds."""
    while not condition():
        await asyncio.sleep(0.01)


def arrivals(cosched: CoScheduler) -> list[str]:
    """The session of every request that reached this replica's co-scheduler, in order."""
    return [r.session_id for r in cosched.records if r.action == "arrive"]


@contextlib.asynccontextmanager
async def gateways(steps: list[float]) -> AsyncIterator[tuple[list[CoScheduler], list[str]]]:
    """One `tao serve`-like gateway per step time, each over its own simulated engine."""
    coscheds = [CoScheduler(SimEngine(profile(step)), FCFS()) for step in steps]
    async with contextlib.AsyncExitStack() as stack:
        urls = [await stack.enter_async_context(serving(cosched, "m")) for cosched in coscheds]
        yield coscheds, urls


@contextlib.asynccontextmanager
async def plain_server(cosched: CoScheduler) -> AsyncIterator[str]:
    """A plain OpenAI-compatible server: the gateway's own chat and model routes, without Tao's extensions (no
    /v1/tao/* routes, no X-Tao-Gateway header), as `vllm serve` or a hosted API would answer."""
    import uvicorn
    from starlette.applications import Starlette

    from harness.engine.server import free_port

    app = Starlette(routes=[r for r in build_app(cosched, "m").routes if "/tao/" not in getattr(r, "path", "")])
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve())
    try:
        await until(lambda: server.started or task.done())
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        await task


async def connect(urls: list[str]) -> ReplicaSet:
    return await ReplicaSet.connect(urls, model=None, constrained=True, temperature=0.0, api_key=None)


# -- flags ---------------------------------------------------------------------------------------------


def test_engine_url_repeated_and_from_a_file(tmp_path: Path) -> None:
    listed = tmp_path / "replicas.txt"
    listed.write_text("# the GPU nodes\nhttp://10.0.0.2:8000/v1\n\n  http://10.0.0.3:8000/v1  # node 3\n")
    args = build_parser().parse_args(["run", "t", "--engine-url", "http://10.0.0.1:8000/v1",
                                      "--engine-url", f"@{listed}"])
    options = engine_options(args)
    assert options.kind == "openai" and options.base_url is None
    assert options.replicas == ("http://10.0.0.1:8000/v1", "http://10.0.0.2:8000/v1", "http://10.0.0.3:8000/v1")
    one = engine_options(build_parser().parse_args(["swebench", "--instances", "i", "--repos", "r", "--output", "o",
                                                    "--engine-url", "http://h:1/v1"]))
    assert (one.kind, one.base_url, one.replicas) == ("openai", "http://h:1/v1", ())


@pytest.mark.parametrize(("flags", "says"), [
    (["--engine-url", "@/nonexistent/replicas.txt"], "cannot read /nonexistent/replicas.txt"),
    (["--engine-url", "http://h:1/v1", "--engine-url", "http://h:1/v1"], "given twice"),
    (["--engine-url", "http://h:1/v1", "--base-url", "http://h:2/v1"], "leave out --base-url"),
    (["--engine-url", "http://h:1/v1", "--engine", "replay"], "leave out --engine replay"),
])
def test_engine_url_mistakes_say_what_to_do(flags: list[str], says: str) -> None:
    with pytest.raises(UsageError, match=says):
        engine_options(build_parser().parse_args(["run", "t", *flags]))


def test_a_file_without_urls_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "none.txt"
    empty.write_text("# nothing yet\n\n")
    with pytest.raises(UsageError, match="lists no URL"):
        read_urls([f"@{empty}"])


# -- the rule ------------------------------------------------------------------------------------------


def test_the_rule_on_hand_made_loads() -> None:
    idle, busy = EngineLoad(0, 0, 0.05), EngineLoad(3, 0, 0.55)
    assert choose([busy, idle, busy], [0, 5, 0], [True] * 3, 0) == 1  # most room wins over sessions sent
    assert choose([idle, EngineLoad(0, 2, 0.0), idle], [4, 0, 4], [True] * 3, 1) == 2  # a queue is no room
    assert choose([idle, EngineLoad(1, 0, 0.09)], [1, 0], [True] * 2, 0) == 1  # same tenth: fewest sent
    assert choose([idle, idle, idle], [1, 1, 1], [True] * 3, 2) == 2  # all equal: round robin from the turn
    assert choose([None, idle, idle], [0, 3, 3], [True] * 3, 1) == 0  # a plain server: fewest sent, loads unused
    assert choose([idle, idle], [0, 5], [False, True], 0) == 1  # a gateway that stopped answering gets none
    assert choose([idle, idle], [0, 5], [False, False], 0) == 0  # unless every one did


# -- real gateways ---------------------------------------------------------------------------------------


async def test_sessions_stick_to_one_replica_and_new_ones_go_to_the_least_loaded() -> None:
    async with gateways([1.0, 0.005, 0.005]) as (coscheds, urls):
        replicas = await connect(urls)
        try:
            # the hand-made load: one long request holds 40% of replica 0's KV cache (its steps last a second)
            hog = asyncio.create_task(drain(replicas.replicas[0], request("hog", 400, 10_000)))
            await until(lambda: coscheds[0].occupancy().kv_usage >= 0.4)
            await replicas.refresh()
            assert replicas.loads[0] is not None and replicas.loads[0].kv_usage >= 0.4
            views = {name: replicas.for_session(name, "batch") for name in ("s1", "s2", "s3", "s4")}
            assert [v.base_url for v in views.values()] == [urls[1], urls[2], urls[1], urls[2]]
            assert views["s1"].name.endswith(f" at {urls[1]}")  # the trajectory's session_start says where it ran
            for step in range(3):
                await asyncio.gather(*(drain(v, request(f"{name}-{step}")) for name, v in views.items()))
            assert replicas.for_session("s1", "batch").base_url == urls[1]  # pinned: asked again, the same one
            hog.cancel()
        finally:
            await replicas.close()
    assert Counter(arrivals(coscheds[1])) == {"s1": 3, "s3": 3} and Counter(arrivals(coscheds[2])) == {"s2": 3, "s4": 3}
    assert replicas.sent == [0, 2, 2]


async def test_scripted_answers_over_replicas_keep_each_session_on_one() -> None:
    """`tao swebench --replay DIR --engine-url A --engine-url B`: the scripted engine forces each instance's turns
    through its session's own view of the replicas, so every request carries its session and stays on one. (The
    simulated gateways do not force text: only vLLM servers take the forcing regex, so routing is what is checked.)"""
    from harness.engine.api import for_session
    from harness.engine.recorded import Recording, Turn
    from harness.swebench.scripted import ScriptedEngine

    scripts = {i: Recording([Turn(f"{i} first"), Turn(f"{i} second")]) for i in ("i1", "i2")}
    async with gateways([0.005, 0.005]) as (coscheds, urls):
        scripted = ScriptedEngine(scripts, {"task one": "i1", "task two": "i2"}, inner=await connect(urls))
        try:
            for session, task in (("s1", "task one"), ("s2", "task two")):
                view = for_session(scripted, session, "batch")
                messages: list[dict[str, object]] = [{"role": "user", "content": task}]
                for step in range(2):
                    await drain(view, LLMRequest(f"{session}-{step}", messages, max_tokens=4))
                    messages = [*messages, {"role": "assistant", "content": f"answer {step}"}]
        finally:
            await scripted.close()
    assert {session for c in coscheds for session in arrivals(c)} == {"s1", "s2"}  # none as "(no session)"
    assert sorted(Counter(arrivals(c)) for c in coscheds) == sorted([Counter(s1=2), Counter(s2=2)])


async def test_plain_servers_get_the_fewest_sessions_sent() -> None:
    coscheds = [CoScheduler(SimEngine(profile(0.005)), FCFS()) for _ in range(2)]
    async with plain_server(coscheds[0]) as first, plain_server(coscheds[1]) as second:
        replicas = await connect([first, second])
        try:
            assert replicas.loads == [None, None] and not replicas.gateway
            views = [replicas.for_session(f"s{i}", "batch") for i in range(5)]
            for i, view in enumerate(views):
                await drain(view, request(f"r{i}"))
        finally:
            await replicas.close()
    assert [v.base_url for v in views] == [first, second, first, second, first]
    assert [len(arrivals(c)) for c in coscheds] == [3, 2]


async def test_an_unreachable_replica_at_start_is_named() -> None:
    from harness.engine.server import free_port

    async with gateways([0.005]) as (_, urls):
        dead = f"http://127.0.0.1:{free_port()}/v1"
        with pytest.raises(EngineUnavailable, match=rf"replica 2 of 2 \({dead}\).*leave it out of --engine-url"):
            await connect([urls[0], dead])


async def test_a_replica_that_dies_fails_its_sessions_naming_it() -> None:
    coscheds = [CoScheduler(SimEngine(profile(0.005)), FCFS()) for _ in range(2)]
    async with serving(coscheds[0], "m") as kept:
        async with serving(coscheds[1], "m") as doomed:
            replicas = await connect([kept, doomed])
            survivor, victim = replicas.for_session("a", "batch"), replicas.for_session("b", "batch")
            assert (survivor.base_url, victim.base_url) == (kept, doomed)
        try:
            with pytest.raises(EngineDied, match=doomed):
                await drain(victim, request("b-1"))
            await drain(survivor, request("a-1"))  # the other replica goes on
            await replicas.refresh()
            assert replicas.up == [True, False]
            assert replicas.for_session("c", "batch").base_url == kept  # no new session goes to the dead one
        finally:
            await replicas.close()
