"""`tao serve` for real: vLLM's OpenAI-compatible server with the embedded model, attached to by
`open_engine`, streamed through the openai engine, and killed mid-request to prove a dead engine ends
the session with a recorded reason and the trajectory so far."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import protocol
from harness.engine import server
from harness.engine.api import LLMRequest
from harness.engine.factory import EngineOptions, open_engine
from harness.engine.openai_http import OpenAIEngine
from harness.events import LLMFirstToken, SessionEnd, SessionStart, TrajectoryWriter, read_trajectory
from harness.session import Session, SessionConfig
from sandbox import Workspace
from tests.helpers import ROOT, make_calc_repo
from tools import default_tools, tool_specs

pytestmark = pytest.mark.engine

SPECS = tool_specs(default_tools())


@pytest.fixture(scope="module")
def served(embedded_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[server.ServerState]:
    """A `tao serve` server for the embedded model, its state file kept in a private runtime directory."""
    runtime = tmp_path_factory.mktemp("runtime")
    old = os.environ.get("XDG_RUNTIME_DIR")
    os.environ["XDG_RUNTIME_DIR"] = str(runtime)
    state = server.start_server(str(embedded_model), max_model_len=8192)
    try:
        yield state
    finally:
        server.stop_server(state)
        if old is None:
            os.environ.pop("XDG_RUNTIME_DIR", None)
        else:
            os.environ["XDG_RUNTIME_DIR"] = old


async def test_default_engine_attaches_and_streams_constrained_calls(served: server.ServerState) -> None:
    assert server.state_path().parent.parent == Path(os.environ["XDG_RUNTIME_DIR"])
    engine = await open_engine(EngineOptions())
    try:
        assert isinstance(engine, OpenAIEngine) and "tao serve" in engine.name and not engine.native_tools
        messages = [{"role": "system", "content": protocol.render_system_prompt(SPECS, "/work/calc")},
                    {"role": "user", "content": "Run the tests."}]
        usages = []
        for _ in range(2):
            text, usage = "", None
            async for chunk in engine.stream(LLMRequest(uuid.uuid4().hex, messages, SPECS, max_tokens=320, priority=1)):
                text += chunk.text
                usage = chunk.usage or usage
            parser = protocol.CallParser()
            parser.feed(text)
            parser.finish()
            assert len(parser.calls) == 1 and not parser.errors, text
            usages.append(usage)
        assert usages[0].prompt_tokens > 1000 and usages[0].output_tokens > 0
        assert usages[1].cached_tokens > usages[0].prompt_tokens // 2  # reported by --enable-prompt-tokens-details
        story = LLMRequest(uuid.uuid4().hex, [{"role": "user", "content": "Tell a very long story."}], max_tokens=2000)
        chunks = []
        async for chunk in engine.stream(story):
            chunks.append(chunk)
            if len(chunks) == 3:
                await engine.abort(story.request_id)
        assert chunks[-1].finish_reason == "abort" and len(chunks) < 50
    finally:
        await engine.close()
    status = subprocess.run([sys.executable, "-m", "harness.cli", "serve", "--status"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert status.returncode == 0 and served.url in status.stdout


async def test_server_killed_mid_request_ends_the_session_with_its_reason(served: server.ServerState,
                                                                         tmp_path: Path) -> None:
    engine = await open_engine(EngineOptions())
    assert isinstance(engine, OpenAIEngine)
    trajectory = tmp_path / "run.jsonl"
    writer = TrajectoryWriter(trajectory)

    def kill_on_first_token(event: object) -> None:
        writer.write(event)
        if isinstance(event, LLMFirstToken):
            os.killpg(served.pid, signal.SIGKILL)  # the server and its engine core: its own process group

    session = Session("Fix add in calc/ops.py.", engine, Workspace(make_calc_repo(tmp_path)), default_tools(),
                      SessionConfig(max_steps=3, max_tokens=320), [kill_on_first_token])
    try:
        end = await session.run()
    finally:
        writer.close()
        await engine.close()
    assert end.status == "error" and "stopped answering" in end.reason, end.reason
    events = read_trajectory(trajectory)
    assert isinstance(events[0], SessionStart) and any(isinstance(e, LLMFirstToken) for e in events)
    assert isinstance(events[-1], SessionEnd) and events[-1].reason == end.reason
    assert server.running_server() is None  # a later `tao run` starts in-process instead
