"""A foreign agent through `tao serve`: mini-swe-agent's LiteLLM model, pointed at the gateway, is paced like Tao.

Three mini-swe-agent sessions run at once, each in its own git repository, against the gateway served on
127.0.0.1 in front of the real engine through a CoScheduler (room for two requests, so it has to queue).
Two name their session with the `X-Session-Id` header, one with the body's `user` field (for clients that
cannot set headers). Every HTTP request the agents sent must have arrived in the co-scheduler under its
session and ended there, and every agent must end (any exit status: the embedded 135M model writes no
sensible commands, so a step limit ends it). The engine writes its calls in Tao's text protocol, which the
gateway hands to mini-swe-agent as OpenAI `tool_calls`: its agents run the bash commands in their repositories.
"""

from __future__ import annotations

import asyncio
import socket
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness.coscheduler import CoScheduler, Pacing
from harness.gateway import KEEP_ALIVE, ASGIApp, Message, Scope, build_app
from tests.helpers import make_calc_repo

pytestmark = pytest.mark.engine

MODEL = "tao-embedded"  # the id the gateway serves; a client asks for `openai/<id>`
SESSIONS = 3
STEPS = 3  # model calls per agent at most
SYSTEM = "You are a helpful assistant that can interact with a computer through the bash tool."
INSTANCE = ("{{task}}\nRun one bash command per answer. When done, run "
            "`echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT` on its own.")
TASK = "A test in tests/test_ops.py fails. Find the bug in the calc package and fix it."


class CountCompletions:
    """ASGI middleware: counts the chat completion requests reaching the server, by the session they name."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.requests: Counter[str] = Counter()  # session header, or "" when the request has none

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Message]],
                       send: Callable[[Message], Awaitable[None]]) -> None:
        if scope["type"] == "http" and scope["path"] == "/v1/chat/completions":
            headers = dict(scope["headers"])
            self.requests[headers.get(b"x-session-id", b"").decode()] += 1
        await self.app(scope, receive, send)


@dataclass(frozen=True)
class Outcome:
    """How one agent ended and how many model calls it made."""

    session: str
    exit_status: str
    calls: int
    commands: int  # bash commands the agent ran (each answer's tool call, whose output went back to the model)


def quiet_minisweagent(monkeypatch: pytest.MonkeyPatch, config_dir: Path) -> None:
    """mini-swe-agent and LiteLLM read these when imported or called: no banner, no config written to the
    home directory, no download of LiteLLM's price list, no error for an unknown model's cost, no retries
    (a failed request fails the test at once)."""
    monkeypatch.setenv("MSWEA_SILENT_STARTUP", "1")
    monkeypatch.setenv("MSWEA_GLOBAL_CONFIG_DIR", str(config_dir))
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    monkeypatch.setenv("MSWEA_COST_TRACKING", "ignore_errors")
    monkeypatch.setenv("MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT", "1")
    import litellm

    monkeypatch.setattr(litellm, "suppress_debug_info", True)  # its provider list, printed on each cost lookup


def run_agent(base_url: str, session: str, by_header: bool, repo: Path) -> Outcome:
    """One mini-swe-agent session, run to its end without a terminal (DefaultAgent asks nothing)."""
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.environments.local import LocalEnvironment
    from minisweagent.models.litellm_model import LitellmModel

    # LiteLLM drops a `user` argument for models outside OpenAI's catalog; `extra_body` sends it as given
    naming = {"extra_headers": {"X-Session-Id": session}} if by_header else {"extra_body": {"user": session}}
    # room for the engine's bounded reasoning (64 tokens) and then a bash call
    model = LitellmModel(model_name=f"openai/{MODEL}", cost_tracking="ignore_errors",
                         model_kwargs={"api_base": base_url, "api_key": "unused", "max_tokens": 128,
                                       "num_retries": 0, **naming})
    agent = DefaultAgent(model, LocalEnvironment(cwd=str(repo), timeout=10), system_template=SYSTEM,
                         instance_template=INSTANCE, step_limit=STEPS, cost_limit=0.0)
    result = agent.run(TASK)
    commands = sum(1 for message in agent.messages if message.get("role") == "tool"
                   and "<returncode>" in str(message.get("content")))
    return Outcome(session, result.get("exit_status", ""), agent.n_calls, commands)


async def test_mini_swe_agent_sessions_are_paced_told_apart_and_end(
        greedy: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import uvicorn

    quiet_minisweagent(monkeypatch, tmp_path / "mswea-config")
    # greedy: that some answer is a whole bash call within 128 tokens must not be left to sampling
    cosched = CoScheduler(greedy, Pacing(knee=2, kv_tokens=40_000, max_wait=1e6))
    counted = CountCompletions(build_app(cosched, MODEL))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    base_url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    server = uvicorn.Server(uvicorn.Config(counted, log_level="warning", access_log=False, lifespan="off",
                                           timeout_keep_alive=KEEP_ALIVE))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            assert not serving.done(), "the gateway stopped while starting"
            await asyncio.sleep(0.01)
        sessions = [f"mswea-{i}" for i in range(SESSIONS)]
        agents = [asyncio.to_thread(run_agent, base_url, session, i % 2 == 0, make_calc_repo(tmp_path / session))
                  for i, session in enumerate(sessions)]
        outcomes = await asyncio.wait_for(asyncio.gather(*agents), 600)
    finally:
        server.should_exit = True
        await serving
        sock.close()

    arrived = Counter(r.session_id for r in cosched.records if r.action == "arrive")
    ended = Counter(r.session_id for r in cosched.records if r.action == "end")
    for outcome in outcomes:  # every agent ended, each after at least one request and within its step limit
        assert outcome.exit_status, outcomes
        assert 1 <= outcome.calls <= STEPS, outcomes
    # the sessions were told apart: each one's requests arrived under its own id, as many as the agent made
    assert arrived == {o.session: o.calls for o in outcomes}, (arrived, outcomes)
    assert ended == arrived, cosched.records  # and each ran to its end in the engine
    # every HTTP request reached the co-scheduler: those named by header, and the one session named by `user`
    assert sum(counted.requests.values()) == sum(arrived.values()), counted.requests
    assert {s: n for s, n in counted.requests.items() if s} == {s: arrived[s] for s in sessions[::2]}
    assert counted.requests[""] == arrived[sessions[1]]
    # the gateway gave the engine's text-protocol calls to mini-swe-agent as tool_calls, and its agents ran them
    assert any(outcome.commands for outcome in outcomes), outcomes
