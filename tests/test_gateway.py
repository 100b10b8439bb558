"""The `tao serve` gateway over real sockets: the OpenAI API round trip (streamed and not, tools, session ids),
the Tao hint and pacing endpoints, bad input, and aborts. Fast tests use the replay and simulated engines;
`@pytest.mark.engine` tests go through the real vLLM engine."""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from harness import protocol
from harness.coscheduler import FCFS, CoScheduler, Pacing
from harness.engine.api import WARM_PRIORITY, Engine
from harness.engine.recorded import Recording, ReplayEngine, Turn
from harness.engine.sim import CPU, SimEngine
from harness.cli import build_parser
from harness.errors import UsageError
from harness.flags import cosched_policy
from harness.gateway import policy_for, serving
from harness.gateway_requests import Completion, parse_completion
from tools import default_tools, tool_specs

if TYPE_CHECKING:
    from harness.engine.vllm_local import VLLMEngine

SPECS = tool_specs(default_tools())
CALL = {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}


def replay(turns: int = 4) -> ReplayEngine:
    """A replay engine whose every turn says a few words and makes one native call."""
    return ReplayEngine(Recording([Turn("Reading the file now.", [CALL]) for _ in range(turns)]))


async def sse_events(response: httpx.Response) -> AsyncIterator[dict[str, Any] | str]:
    """The `data:` payloads of a server-sent event stream, JSON decoded except `[DONE]`."""
    async for line in response.aiter_lines():
        if line.startswith("data: "):
            data = line.removeprefix("data: ")
            yield data if data == "[DONE]" else json.loads(data)


def body(**extra: Any) -> dict[str, Any]:
    """A small chat completion body."""
    return {"model": "m", "messages": [{"role": "user", "content": "Read a.py."}], **extra}


async def test_round_trip_streamed_and_not_with_native_tool_calls() -> None:
    cosched = CoScheduler(replay(), FCFS())
    async with serving(cosched, "m") as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
        health = await client.get(url.removesuffix("/v1") + "/health")
        assert health.status_code == 200 and health.text == "ok" and health.headers["x-tao-gateway"] == "1"
        models = (await client.get("/models")).json()
        assert [m["id"] for m in models["data"]] == ["m"] and models["data"][0]["tao"]["native_tools"] is True

        done = await client.post("/chat/completions", json=body(tools=SPECS, max_tokens=50))
        assert done.status_code == 200 and done.headers["x-tao-gateway"] == "1"
        answer = done.json()
        choice = answer["choices"][0]
        assert answer["object"] == "chat.completion" and choice["finish_reason"] == "tool_calls"
        assert choice["message"]["content"] == "Reading the file now."
        assert choice["message"]["tool_calls"] == [CALL]
        assert answer["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
        usage = answer["usage"]
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]

        async with client.stream("POST", "/chat/completions", json=body(tools=SPECS, stream=True)) as streamed:
            assert streamed.headers["content-type"].startswith("text/event-stream")
            events = [event async for event in sse_events(streamed)]
    assert events[-1] == "[DONE]"
    chunks = [e for e in events if isinstance(e, dict)]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert deltas[0]["role"] == "assistant"
    assert "".join(d.get("content", "") for d in deltas) == "Reading the file now."
    calls = [call for d in deltas for call in d.get("tool_calls", [])]
    assert calls == [{**CALL, "index": 0}]
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "tool_calls"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0
    assert [r.action for r in cosched.records].count("admit") == 2  # both went through the co-scheduler


async def test_sessions_are_told_apart_by_header_then_user_then_fresh_ids() -> None:
    cosched = CoScheduler(replay(4), FCFS())
    async with serving(cosched, "m") as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
        await client.post("/chat/completions", json=body(user="from-user"), headers={"X-Session-Id": "from-header"})
        await client.post("/chat/completions", json=body(user="from-user"))
        await client.post("/chat/completions", json=body())
        await client.post("/chat/completions", json=body())
    sessions = [r.session_id for r in cosched.records if r.action == "arrive"]
    assert sessions[:2] == ["from-header", "from-user"]
    assert len(set(sessions[2:])) == 2 and all(s.startswith("anon-") for s in sessions[2:])
    assert set(cosched.sessions) == set(sessions)


async def test_hint_reaches_the_coscheduler_and_pacing_says_where_a_session_stands() -> None:
    cosched = CoScheduler(replay(), Pacing(knee=2, kv_tokens=10_000, max_wait=60.0))
    async with serving(cosched, "m") as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
        await client.post("/chat/completions", json=body(), headers={"X-Session-Id": "s1"})
        hint = await client.post("/tao/hint", json={"session": "s1", "event": "tool_start", "expected_seconds": 2.5})
        assert hint.status_code == 204 and hint.headers["x-tao-gateway"] == "1"
        assert cosched.sessions["s1"].tool_expected == 2.5 and cosched.sessions["s1"].tool_started is not None
        unknown = await client.post("/tao/hint", json={"session": "s2", "event": "tool_start",
                                                       "expected_seconds": None})
        assert unknown.status_code == 204 and cosched.sessions["s2"].tool_expected is None
        pacing = (await client.get("/tao/pacing/s1")).json()
    assert pacing == {"admitted": False, "waited": None, "position": None, "sessions": 0, "kv_usage": None,
                      "policy": "pacing"}


@pytest.mark.parametrize(("path", "sent", "headers", "status", "says"), [
    ("/chat/completions", b"not json", {}, 400, "not JSON"),
    ("/chat/completions", {"model": "m"}, {}, 400, "`messages` must be a non-empty list"),
    ("/chat/completions", body(tools=[{"type": "function"}]), {}, 400, "`tools` must be a list"),
    ("/chat/completions", body(max_tokens=0), {}, 400, "`max_tokens` must be a positive integer"),
    ("/chat/completions", body(n=2), {}, 400, "`n` must be 1"),
    ("/chat/completions", body(), {"X-Tao-Class": "urgent"}, 400, "X-Tao-Class header must be one of"),
    ("/chat/completions", {**body(), "model": "gpt-9"}, {}, 404, "serves 'm'"),
    ("/chat/completions", {"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, {},
     400, "only text parts"),
    ("/tao/hint", {"session": "s", "event": "tool_end"}, {}, 400, '"event": "tool_start"'),
    ("/tao/hint", {"session": "s", "event": "tool_start", "expected_seconds": "soon"}, {}, 400, "non-negative"),
])
async def test_bad_input_gets_an_openai_error_saying_what_was_expected(
        path: str, sent: object, headers: dict[str, str], status: int, says: str) -> None:
    cosched = CoScheduler(replay(), FCFS())
    async with serving(cosched, "m") as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
        content = sent if isinstance(sent, bytes) else json.dumps(sent).encode()
        answer = await client.post(path, content=content, headers={"Content-Type": "application/json", **headers})
    assert answer.status_code == status and answer.headers["x-tao-gateway"] == "1"
    error = answer.json()["error"]
    assert says in error["message"] and error["code"] == status and error["type"]
    assert not cosched.records  # nothing reached the co-scheduler


async def test_a_prompt_too_long_for_the_engine_is_refused_with_the_reason() -> None:
    engine = ReplayEngine(Recording([Turn("never")]), max_model_len=10)
    cosched = CoScheduler(engine, FCFS())
    long = {"messages": [{"role": "user", "content": "word " * 100}]}
    async with serving(cosched, "m") as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
        whole = await client.post("/chat/completions", json=long)
        async with client.stream("POST", "/chat/completions", json={**long, "stream": True}) as streamed:
            events = [event async for event in sse_events(streamed)]
    assert whole.status_code == 400 and "context holds 10" in whole.json()["error"]["message"]
    assert events[-1] == "[DONE]" and isinstance(events[0], dict)
    assert "context holds 10" in events[0]["error"]["message"]
    assert [r.action for r in cosched.records].count("end") == 2  # the co-scheduler's books are closed


async def test_a_client_that_goes_away_mid_stream_aborts_its_request() -> None:
    engine = SimEngine(CPU)
    cosched = CoScheduler(engine, FCFS())
    async with serving(cosched, "m") as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
        async with client.stream("POST", "/chat/completions", json=body(stream=True, max_tokens=5000)) as streamed:
            async for event in sse_events(streamed):
                if isinstance(event, dict) and event["choices"][0]["delta"].get("content"):
                    break  # the first token came: hang up
        while not any(r.action == "end" for r in cosched.records):
            await asyncio.sleep(0.01)
    assert engine.stats.aborted == 1 and not engine.running and engine.stats.output_tokens < 5000


async def test_a_non_streamed_request_is_aborted_when_its_client_goes_away() -> None:
    engine = SimEngine(CPU)
    cosched = CoScheduler(engine, FCFS())
    async with serving(cosched, "m") as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
        request = asyncio.create_task(client.post("/chat/completions", json=body(max_tokens=5000)))
        while not engine.stats.output_tokens:
            await asyncio.sleep(0.01)
        request.cancel()  # closes the connection
        while not any(r.action == "end" for r in cosched.records):
            await asyncio.sleep(0.01)
    assert engine.stats.aborted == 1 and not engine.running


def text_replay(turns: int = 2) -> ReplayEngine:
    """A replay engine whose every answer is in Tao's text protocol (as the embedded engine writes it): a few words,
    then one call."""
    answer = f'Reading it. {protocol.OPEN}{{"name": "read_file", "arguments": {{"path": "a.py"}}}}{protocol.CLOSE}'
    return ReplayEngine(Recording([Turn(answer) for _ in range(turns)]))


async def test_a_text_protocol_call_reaches_a_plain_client_as_tool_calls() -> None:
    cosched = CoScheduler(text_replay(), FCFS())
    async with serving(cosched, "m") as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
        tao = (await client.get("/models")).json()["data"][0]["tao"]
        whole = (await client.post("/chat/completions", json=body(tools=SPECS))).json()
        async with client.stream("POST", "/chat/completions", json=body(tools=SPECS, stream=True)) as streamed:
            events = [event async for event in sse_events(streamed)]
    assert tao["native_tools"] is False and tao["tool_calls"] is True  # the engine's own; the gateway's to others
    choice = whole["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] == "Reading it. "
    [call] = choice["message"]["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "read_file" and json.loads(call["function"]["arguments"]) == {"path": "a.py"}
    deltas = [e["choices"][0]["delta"] for e in events if isinstance(e, dict) and e["choices"]]
    assert "".join(d.get("content", "") for d in deltas) == "Reading it. "
    [streamed_call] = [c for d in deltas for c in d.get("tool_calls", [])]  # one delta, once the call was complete
    assert streamed_call["index"] == 0 and streamed_call["function"] == call["function"]
    reasons = [e["choices"][0]["finish_reason"] for e in events if isinstance(e, dict) and e["choices"]]
    assert reasons[-1] == "tool_calls"


async def test_a_client_that_parses_the_protocol_itself_gets_the_raw_text() -> None:
    cosched = CoScheduler(text_replay(), FCFS())
    raw = {"X-Tao-Protocol": "text"}
    async with serving(cosched, "m") as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
        whole = (await client.post("/chat/completions", json=body(tools=SPECS), headers=raw)).json()
        async with client.stream("POST", "/chat/completions", json=body(tools=SPECS, stream=True),
                                 headers=raw) as streamed:
            events = [event async for event in sse_events(streamed)]
    text = text_replay().recording.turns[0].text
    assert whole["choices"][0]["message"] == {"role": "assistant", "content": text}
    assert whole["choices"][0]["finish_reason"] == "stop"
    deltas = [e["choices"][0]["delta"] for e in events if isinstance(e, dict) and e["choices"]]
    assert "".join(d.get("content", "") for d in deltas) == text and not any("tool_calls" in d for d in deltas)


def parsed(extra: dict[str, Any], headers: dict[str, str] | None = None) -> Completion:
    """A small body with `extra` fields, as the gateway reads it with `headers` (lowercase, as HTTP gives them)."""
    return parse_completion(body(**extra), headers or {}, "m")


def test_a_body_priority_counts_only_when_it_marks_a_warm_prefill() -> None:
    assert parsed({"priority": -100}).request.priority == 0  # a client cannot rank itself above its class
    assert parsed({"priority": 5}, {"x-tao-class": "interactive"}).request.priority == -1
    warm = parsed({"priority": WARM_PRIORITY, "tao_prompt_limit": 64, "max_tokens": 1}).request
    assert (warm.priority, warm.prompt_limit, warm.max_tokens) == (WARM_PRIORITY, 64, 1)
    assert parsed({}).request.prompt_limit is None and not parsed({}).raw_text
    assert parsed({}, {"x-tao-protocol": "text"}).raw_text


def test_serve_and_swebench_build_their_policy_alike_from_the_same_flags() -> None:
    parser = build_parser()

    def serve(*flags: str) -> object:
        """The policy `tao serve` builds from these pacing flags (the KV size given, as swebench's default)."""
        return policy_for(parser.parse_args(["serve", "--kv-tokens", "46000", *flags]), replay())

    def swebench(*flags: str) -> object:
        """The policy `tao swebench` builds from the same flags (its --cosched is serve's --policy)."""
        args = parser.parse_args(["swebench", "--instances", "i.jsonl", "--repos", "repos", "--output", "out",
                                  *[flag.replace("--policy", "--cosched") for flag in flags]])
        return cosched_policy(args.cosched, args.knee, args.kv_tokens, args.max_wait)

    assert serve() == swebench() == Pacing(knee=4, kv_tokens=46_000, max_wait=120.0)
    assert isinstance(serve("--policy", "fcfs"), FCFS) and isinstance(swebench("--policy", "fcfs"), FCFS)
    for build in (serve, swebench):
        for bad in (["--knee", "0"], ["--max-wait", "0"]):
            with pytest.raises(UsageError, match=f"bad pacing flag: {bad[0]} 0 \\(expected "):
                build(*bad)


def warm_body() -> dict[str, Any]:
    """A warm prefill as Tao's client sends it: its priority, one token, the prompt's first tokens only."""
    return body(priority=WARM_PRIORITY, max_tokens=1, tao_prompt_limit=8)


async def until_recorded(cosched: CoScheduler, action: str, session: str) -> None:
    """Wait until the co-scheduler did `action` to a request of `session`."""
    while not any(r.action == action and r.session_id == session for r in cosched.records):
        await asyncio.sleep(0.01)


def post(client: httpx.AsyncClient, session: str, sent: dict[str, Any]) -> asyncio.Task[httpx.Response]:
    """A chat completion request of `session`, on its way."""
    return asyncio.create_task(client.post("/chat/completions", json=sent, headers={"X-Session-Id": session}))


def spec_actions(cosched: CoScheduler) -> list[str]:
    """What the co-scheduler did with speculative requests, in order."""
    return [r.action for r in cosched.records if r.speculative]


async def test_a_warm_prefill_is_speculative_and_aborted_when_a_real_request_waits() -> None:
    engine = SimEngine(CPU)
    cosched = CoScheduler(engine, Pacing(knee=1, kv_tokens=10_000, max_wait=60.0))
    async with serving(cosched, "m") as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
        warm = post(client, "guess", {**warm_body(), "max_tokens": 5000})  # a prefill that would not end soon
        await until_recorded(cosched, "admit", "guess")
        real = (await post(client, "other", body(max_tokens=4))).json()
        answer = (await warm).json()
    assert spec_actions(cosched) == ["arrive", "admit", "abort", "end"]
    assert answer["choices"][0]["finish_reason"] == "abort" and engine.stats.aborted == 1
    assert real["usage"]["completion_tokens"] > 0


async def test_a_waiting_warm_prefill_is_dropped_when_its_session_sends_the_real_request() -> None:
    engine = SimEngine(CPU)
    cosched = CoScheduler(engine, Pacing(knee=1, kv_tokens=10_000, max_wait=60.0))
    async with serving(cosched, "m") as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
        busy = post(client, "busy", body(max_tokens=5000))  # holds the engine's one place
        await until_recorded(cosched, "admit", "busy")
        warm = post(client, "s", warm_body())
        await until_recorded(cosched, "arrive", "s")
        real = post(client, "s", body(max_tokens=4))
        await until_recorded(cosched, "drop", "s")
        busy.cancel()  # the busy client goes away: the real request gets the place
        answers = [(await task).json() for task in (warm, real)]
    assert spec_actions(cosched) == ["arrive", "drop"]  # it never ran
    assert answers[0]["choices"][0]["finish_reason"] == "abort" and answers[1]["usage"]["completion_tokens"] > 0


# -- the real engine ---------------------------------------------------------------------------------


@pytest.mark.engine
async def test_real_engine_round_trip_streamed_and_not(greedy: VLLMEngine) -> None:
    # Greedy: the whole answer must be a complete call within its budget, which a sampled answer misses by chance
    # (a string argument run past 320 tokens); the gateway's handling is the same at any temperature.
    vllm_engine = greedy
    cosched = CoScheduler(vllm_engine, FCFS())
    messages = [{"role": "system", "content": protocol.render_system_prompt(SPECS, "/work/calc")},
                {"role": "user", "content": "Run the tests."}]
    request = {"model": "smol", "messages": messages, "tools": SPECS, "max_tokens": 320}
    async with serving(cosched, "smol") as url, httpx.AsyncClient(base_url=url, timeout=600) as client:
        models = (await client.get("/models")).json()
        assert models["data"][0]["id"] == "smol" and models["data"][0]["max_model_len"] == vllm_engine.max_model_len
        whole = (await client.post("/chat/completions", json=request, headers={"X-Session-Id": "a"})).json()
        streamed_body = {**request, "stream": True, "user": "b"}
        raw = {"X-Tao-Protocol": "text"}  # as Tao's client asks: the text protocol, which it parses itself
        async with client.stream("POST", "/chat/completions", json=streamed_body, headers=raw) as streamed:
            events = [event async for event in sse_events(streamed)]
        hint = await client.post("/tao/hint", json={"session": "a", "event": "tool_start", "expected_seconds": 3.0})
        pacing = (await client.get("/tao/pacing/a")).json()
    assert hint.status_code == 204 and cosched.sessions["a"].tool_expected == 3.0
    assert pacing["admitted"] is False and pacing["position"] is None and isinstance(pacing["kv_usage"], float)
    # the engine speaks the text protocol, the tools constrained it to one call; a plain client gets it parsed
    message = whole["choices"][0]["message"]
    assert len(message.get("tool_calls", [])) == 1 and protocol.OPEN not in message["content"], message
    assert whole["choices"][0]["finish_reason"] == "tool_calls"
    assert whole["usage"]["prompt_tokens"] > 1000 and whole["usage"]["completion_tokens"] > 0
    chunks = [e for e in events if isinstance(e, dict)]
    # at least the text, the finish reason and the usage; how many pieces the text came in is a matter of time (a
    # reader held up on a busy machine gets the engine's steps merged)
    assert events[-1] == "[DONE]" and len(chunks) >= 3
    assert chunks[-1]["usage"]["prompt_tokens_details"]["cached_tokens"] > 1000  # the same prompt, from the cache
    streamed_text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert protocol.OPEN in streamed_text  # X-Tao-Protocol: text got the raw text, the call's markup in it
    assert [r.session_id for r in cosched.records if r.action == "arrive"] == ["a", "b"]
    policy = policy_for(argparse.Namespace(policy="pacing", kv_tokens=None, knee=4, max_wait=60.0), vllm_engine)
    assert isinstance(policy, Pacing) and policy.kv_tokens == vllm_engine.kv_tokens and policy.kv_tokens > 1000


@pytest.mark.engine
async def test_real_engine_interactive_request_overtakes_queued_batch_requests(vllm_engine: Engine) -> None:
    cosched = CoScheduler(vllm_engine, Pacing(knee=1, kv_tokens=20_000, max_wait=600.0))
    story = [{"role": "user", "content": "Tell a story about a lighthouse."}]

    async def ask(client: httpx.AsyncClient, session: str, kind: str) -> None:
        answer = await client.post("/chat/completions", json={"messages": story, "max_tokens": 48},
                                   headers={"X-Session-Id": session, "X-Tao-Class": kind})
        assert answer.status_code == 200, answer.text

    def arrived(session: str) -> bool:
        return any(r.action == "arrive" and r.session_id == session for r in cosched.records)

    async with serving(cosched, "smol") as url, httpx.AsyncClient(base_url=url, timeout=600) as client:
        batch = [asyncio.create_task(ask(client, f"batch-{i}", "batch")) for i in range(3)]
        while not all(arrived(f"batch-{i}") for i in range(3)):
            await asyncio.sleep(0.01)
        await asyncio.gather(*batch, ask(client, "person", "interactive"))
    person = next(r for r in cosched.records if r.session_id == "person" and r.action == "arrive")
    before = {r.request_id for r in cosched.records[:cosched.records.index(person)] if r.action == "admit"}
    queued = {r.request_id for r in cosched.records if r.action == "arrive" and r.request_id not in before} - {
        person.request_id}
    assert queued, "no batch request was still waiting when the interactive one came"
    admitted = [r.request_id for r in cosched.records if r.action == "admit"]
    assert all(admitted.index(person.request_id) < admitted.index(rid) for rid in queued), cosched.records
