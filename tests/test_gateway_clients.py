"""Tao's own clients on a `tao serve` gateway: the headers every request carries, the hint at a tool's start, the
session's pacing in the TUI's status bar. The gateway here is a small real HTTP server on 127.0.0.1 serving the
contract's endpoints (notes: i24-contract) and recording what it was sent; the clients are the real ones."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from harness.calls.canonical import canonical
from harness.cli import build_parser
from harness.coscheduler import FCFS, CoScheduler
from harness.engine.api import WARM_PRIORITY, Engine, LLMRequest
from harness.engine import openai_http
from harness.engine.openai_http import OpenAIEngine
from harness.engine.recorded import Recording, ReplayEngine, Turn
from harness.engine.sim import CPU, SimEngine
from harness.gateway import KEEP_ALIVE, serving
from harness.hints import ToolHints
from harness.launch import SessionOptions
from harness.session import Session, SessionConfig
from harness.speculation.prediction.latency import modelled_latency
from harness.swebench.batch import Batch, BatchConfig
from harness.swebench.instances import load_instances
from harness.swebench.scripted import ScriptedEngine
from harness.vocabulary import Traffic
from sandbox import Workspace
from tests.helpers import make_calc_repo
from tests.test_swebench_data import make_dataset
from tests.test_tui_support import TASK, event_types, isolated, until  # noqa: F401
from tools import default_tools
from tui.app import TaoApp
from tui.widgets.status.bar import StatusBar, pacing_text

WAITING = {"admitted": False, "waited": 12.4, "position": 3, "sessions": 5, "kv_usage": 0.82, "policy": "pacing"}


@dataclass
class Gateway:
    """What the fake gateway was sent, and what it answers: one tool call per chat request, in order."""

    calls: list[tuple[str, dict[str, Any]]]  # (tool name, arguments) answered to successive chat requests
    says_gateway: bool = True  # answer with `X-Tao-Gateway: 1` (False: a plain OpenAI-compatible server)
    hold_until_polled: bool = False  # keep each answer back until the session's pacing was asked for
    url: str = ""
    chats: list[dict[str, Any]] = field(default_factory=list)  # {"headers": ..., "body": ...}
    hints: list[dict[str, Any]] = field(default_factory=list)  # each with "after_chats": chat requests before it
    polls: list[str] = field(default_factory=list)  # session ids whose pacing was asked for
    polled: asyncio.Event | None = None

    def app(self) -> Starlette:
        """The contract's endpoints over this recorder."""
        return Starlette(routes=[
            Route("/health", lambda _: PlainTextResponse("ok")),
            Route("/v1/models", self.models),
            Route("/v1/chat/completions", self.chat, methods=["POST"]),
            Route("/v1/tao/hint", self.hint, methods=["POST"]),
            Route("/v1/tao/pacing/{session}", self.pacing),
        ])

    def marked(self, response: Response) -> Response:
        if self.says_gateway:
            response.headers["X-Tao-Gateway"] = "1"
        return response

    async def models(self, _: Request) -> Response:
        listed = [{"id": "m", "object": "model", "owned_by": "tao"}]
        return self.marked(JSONResponse({"object": "list", "data": listed}))

    async def chat(self, request: Request) -> Response:
        self.chats.append({"headers": dict(request.headers), "body": await request.json()})
        name, arguments = self.calls[min(len(self.chats), len(self.calls)) - 1]
        return self.marked(StreamingResponse(self.answer(name, arguments), media_type="text/event-stream"))

    async def answer(self, name: str, arguments: dict[str, Any]) -> AsyncIterator[str]:
        if self.hold_until_polled:
            self.polled = self.polled or asyncio.Event()
            await asyncio.wait_for(self.polled.wait(), 60)
        call = {"index": 0, "id": f"call_{len(self.chats)}", "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)}}
        yield _event({"choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}]})
        yield _event({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
                      "usage": {"prompt_tokens": 100, "completion_tokens": 10,
                                "prompt_tokens_details": {"cached_tokens": 60}}})
        yield "data: [DONE]\n\n"

    async def hint(self, request: Request) -> Response:
        self.hints.append({**await request.json(), "after_chats": len(self.chats)})
        return self.marked(Response(status_code=204))

    async def pacing(self, request: Request) -> Response:
        self.polls.append(request.path_params["session"])
        self.polled = self.polled or asyncio.Event()
        self.polled.set()
        return self.marked(JSONResponse(WAITING))


def _event(data: dict[str, Any]) -> str:
    return f"data: {json.dumps(data)}\n\n"


def serve(gateway: Gateway) -> Iterator[Gateway]:
    """Serve the gateway with uvicorn on a free port of 127.0.0.1 in a thread, for the test's duration."""
    server = uvicorn.Server(uvicorn.Config(gateway.app(), host="127.0.0.1", port=0, log_level="warning",
                                           lifespan="off", timeout_keep_alive=KEEP_ALIVE))  # as the real one
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(400):
        if server.started or not thread.is_alive():
            break
        thread.join(0.05)
    assert server.started, "the test gateway did not start"
    gateway.url = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}/v1"
    try:
        yield gateway
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture(autouse=True)
def patient_hints(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hints and pacing polls wait for their answer as long as a busy machine needs: these tests check what they
    carry, and Tao's 1 s bound (quick, or not worth waiting for) would drop one now and then, failing them."""
    monkeypatch.setattr(openai_http, "HINT_TIMEOUT", 60.0)


@pytest.fixture
def gateway() -> Iterator[Gateway]:
    yield from serve(Gateway([("list_files", {}), ("finish", {"summary": "listed"})]))


@pytest.fixture
def plain_server() -> Iterator[Gateway]:
    yield from serve(Gateway([("finish", {"summary": "done"})], says_gateway=False))


async def drain(engine: OpenAIEngine, request_id: str) -> None:
    async for _ in engine.stream(LLMRequest(request_id, [{"role": "user", "content": "hi"}])):
        pass


async def test_each_session_view_says_whose_requests_they_are_and_how_they_rank(gateway: Gateway) -> None:
    engine = await OpenAIEngine.connect(gateway.url)
    assert engine.gateway and "paced by tao serve" in engine.name
    tui, batch = engine.for_session("tui-1", Traffic.INTERACTIVE), engine.for_session("job-7", Traffic.BATCH)
    await drain(tui, "r1")
    await tui.close()  # a session's view leaves the shared connection open
    await drain(batch, "r2")
    await engine.close()
    sent = [(c["headers"].get("x-session-id"), c["headers"].get("x-tao-class")) for c in gateway.chats]
    assert sent == [("tui-1", "interactive"), ("job-7", "batch")]


async def test_a_plain_server_is_sent_no_gateway_headers_hints_or_polls(plain_server: Gateway) -> None:
    engine = await OpenAIEngine.connect(plain_server.url)
    view = engine.for_session("s1", Traffic.INTERACTIVE)
    await drain(view, "r1")
    await view.tool_started(1.0)
    assert await view.pacing() is None and not engine.gateway and "paced" not in engine.name
    await engine.close()
    assert "x-session-id" not in plain_server.chats[0]["headers"] and not plain_server.hints
    assert not plain_server.polls


async def test_a_session_hints_each_tool_start_with_its_expected_duration(gateway: Gateway, tmp_path: Path) -> None:
    engine = await OpenAIEngine.connect(gateway.url)
    session = Session("list the files", engine, Workspace(make_calc_repo(tmp_path)), default_tools(),
                      SessionConfig(max_steps=4))
    end = await session.run()
    for _ in range(200):  # the hint is fire-and-forget: let it land
        if gateway.hints:
            break
        await asyncio.sleep(0.05)
    await engine.close()
    assert end.status == "finished" and end.summary == "listed"
    assert {(c["headers"]["x-session-id"], c["headers"]["x-tao-class"]) for c in gateway.chats} == {
        (session.session_id, "batch")}  # a headless session: nobody waits on each answer
    [hint] = gateway.hints
    assert hint["session"] == session.session_id and hint["event"] == "tool_start"
    assert hint["expected_seconds"] == modelled_latency(canonical("list_files", {}))  # no run of it yet to go by
    assert hint["after_chats"] >= 1  # sent once the model had asked for the tool


async def test_a_calls_expected_duration_is_its_last_run_less_a_speculations_head_start() -> None:
    sent: list[float | None] = []

    async def tool_started(expected: float | None) -> None:
        sent.append(expected)

    hints = ToolHints(type("Engine", (), {"tool_started": staticmethod(tool_started)})(), "/repo")
    call = ("bash", {"command": "python -m pytest -q"})
    hints.started(*call)  # never run yet: the latency model's time for a test run
    hints.ran(*call, 2.0)
    hints.started(*call)  # its last run's time
    hints.started(*call, head_start=0.5)  # a speculation of it has run for half a second already
    hints.started(*call, head_start=5.0)  # ... or has run to its end
    for _ in range(10):  # the hints go out in the background
        await asyncio.sleep(0)
    assert sent == [modelled_latency(canonical(*call)), 2.0, 1.5, 0.0]
    sent.clear()
    hints.group(True)  # calls side by side: each hint is the time until the slowest started so far should end
    hints.started(*call)
    hints.started(*call, head_start=1.5)
    for _ in range(10):
        await asyncio.sleep(0)
    assert sent[0] == 2.0 and 0.5 < sent[1] <= 2.0  # alone, the second would be 0.5
    failing = ToolHints(type("Engine", (), {"tool_started": staticmethod(_fails)})(), "/repo")
    failing.started(*call)  # a hint that cannot be delivered is dropped without a word to the tool
    await asyncio.sleep(0)


async def _fails(expected: float | None) -> None:
    raise ConnectionError("the gateway went away")


def test_pacing_in_words() -> None:
    assert pacing_text(WAITING) == "waiting 12 s at position 3, 5 sessions active, kv 82%"
    assert pacing_text({"admitted": True, "sessions": 1, "kv_usage": 0.1}) == "admitted, 1 session active, kv 10%"
    assert pacing_text({"admitted": False, "waited": None, "position": None}) == "idle"


@pytest.fixture
def held_gateway() -> Iterator[Gateway]:
    yield from serve(Gateway([("finish", {"summary": "done"})], hold_until_polled=True))


async def test_the_tui_shows_its_sessions_pacing_while_the_model_is_asked(isolated: Path,
                                                                         held_gateway: Gateway) -> None:
    repo = make_calc_repo(isolated)
    args = build_parser().parse_args(["tui", "--repo", str(repo), "--engine", "openai", "--base-url", held_gateway.url,
                                      "--no-speculation"])
    app = TaoApp(SessionOptions.from_args(args, repo), masked=True)
    status: Callable[[], str] = lambda: app.query_one(StatusBar).line().plain  # noqa: E731
    async with app.run_test(size=(160, 40)) as pilot:
        await until(pilot, lambda: app.engine is not None, "the engine connected")
        assert not held_gateway.polls  # no model request pending: nobody asks
        await pilot.press(*TASK, "enter")  # the gateway answers only once the session's pacing was asked for
        await until(pilot, lambda: "turn_end" in event_types(app), "the end of the work", tries=1200)
        assert "pacing waiting 12 s at position 3, 5 sessions active, kv 82%" in status()
        assert "paced by tao serve" in status()
        assert app.live is not None
        session_id = app.live.session.session_id
        await until(pilot, lambda: not any(w.group == "pacing" and not w.is_finished for w in app.workers),
                    "no poll on its way")  # the gateway had each poll once its worker ended
        polls = len(held_gateway.polls)
        await pilot.pause(1.5)  # waiting for the user: no more polls (the status bar ticks once a second)
        assert len(held_gateway.polls) == polls
        await pilot.press("ctrl+q")
    assert set(held_gateway.polls) == {session_id}
    assert {(c["headers"]["x-session-id"], c["headers"]["x-tao-class"]) for c in held_gateway.chats} == {
        (session_id, "interactive")}


# -- against the real gateway (harness.gateway) in this process ----------------------------------------


class HintedCoScheduler(CoScheduler):
    """The gateway's co-scheduler, keeping each hint it was given (a hint's effect ends at the next request)."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine, FCFS())
        self.hints: list[tuple[str, float | None]] = []

    def tool_started(self, session_id: str, expected: float | None) -> None:
        self.hints.append((session_id, expected))
        super().tool_started(session_id, expected)


def text_call(name: str, **arguments: Any) -> Turn:
    """A recorded text-protocol answer with one call (the embedded engine's kind of answer)."""
    return Turn(f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>")


async def test_sessions_on_the_gateway_are_told_apart_ranked_and_hinted(tmp_path: Path) -> None:
    turns = [text_call("list_files"), text_call("finish", summary="listed")] * 2
    cosched = HintedCoScheduler(ReplayEngine(Recording(turns)))
    async with serving(cosched, "m") as url:
        engine = await OpenAIEngine.connect(url)
        assert engine.gateway and not engine.native_tools  # the gateway's engine speaks the text protocol
        sessions = [Session(f"task {i}", engine, Workspace(make_calc_repo(tmp_path / str(i))), default_tools(),
                            SessionConfig(max_steps=4)) for i in range(2)]
        ends = [await session.run() for session in sessions]
        pacing = await sessions[0].engine.pacing()  # type: ignore[attr-defined]
        for _ in range(200):  # the hints are fire-and-forget: let them land
            if len(cosched.hints) == 2:
                break
            await asyncio.sleep(0.05)
        await engine.close()
    ids = [session.session_id for session in sessions]
    assert [end.status for end in ends] == ["finished", "finished"]
    arrived = [r.session_id for r in cosched.records if r.action == "arrive"]
    assert arrived == [ids[0], ids[0], ids[1], ids[1]]  # every request through the co-scheduler, told apart
    assert [session for session, _ in cosched.hints] == ids
    assert all(expected == modelled_latency(canonical("list_files", {})) for _, expected in cosched.hints)
    assert pacing is not None and pacing["admitted"] is False and pacing["policy"] == "fcfs"


async def test_a_batch_on_the_gateway_is_paced_there_one_session_per_instance(tmp_path: Path) -> None:
    _, instances_file, scripts = make_dataset(tmp_path)
    instances = load_instances(instances_file)
    scripted = ScriptedEngine.from_dir(scripts, {i.task: i.instance_id for i in instances})
    cosched = HintedCoScheduler(scripted)
    async with serving(cosched, "m") as url:
        engine = await OpenAIEngine.connect(url)
        batch = Batch(instances, engine, BatchConfig(output=tmp_path / "out", repos=tmp_path / "repos", workers=2,
                                                     speculation=False))
        summary = await batch.run()
        await engine.close()
    sessions = {r.session_id for r in cosched.records}
    ran = [r for r in summary["results"] if r["steps"] > 0]
    assert summary["policy"] == "tao serve" and not batch.cosched.records  # no second co-scheduler in front
    assert len(sessions) == len(ran) > 1  # each instance's session has its own id on the gateway


async def test_warm_prefills_go_to_a_gateway_whose_engine_caches_prefixes_as_speculative_work() -> None:
    cosched = CoScheduler(SimEngine(CPU), FCFS())
    async with serving(cosched, "m") as url:
        engine = await OpenAIEngine.connect(url)
        view = engine.for_session("s1", Traffic.BATCH)
        assert engine.prefix_cache and not engine.native_tools  # as the gateway's model list says of its engine
        assert view.headers() == {"X-Session-Id": "s1", "X-Tao-Class": "batch", "X-Tao-Protocol": "text"}
        warm = LLMRequest("w1", [{"role": "user", "content": "hi " * 100}], max_tokens=1, priority=WARM_PRIORITY,
                          prompt_limit=16)
        sent = view.body(warm)
        chunks = [chunk async for chunk in view.stream(warm)]
        await engine.close()
    assert (sent["priority"], sent["tao_prompt_limit"]) == (WARM_PRIORITY, 16)
    assert "priority" not in view.body(LLMRequest("r", [], priority=-1))  # its class says how a real request ranks
    assert chunks[-1].finish_reason is not None and chunks[-1].usage is not None
    assert chunks[-1].usage.prompt_tokens <= 16  # only the prompt's first tokens were prefilled
    assert [(r.action, r.speculative) for r in cosched.records] == [("arrive", True), ("admit", True), ("end", True)]


async def test_a_gateway_over_an_engine_that_caches_nothing_gets_no_warm_prefills() -> None:
    cosched = CoScheduler(ReplayEngine(Recording([text_call("finish", summary="done")])), FCFS())
    async with serving(cosched, "m") as url:
        engine = await OpenAIEngine.connect(url)
        await engine.close()
    assert not engine.prefix_cache  # the speculator then sends it no warm prefills
