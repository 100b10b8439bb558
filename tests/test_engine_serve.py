"""`tao serve` for real, as a detached process: started, asked for its status, used, refused a second time,
stopped; serving an upstream OpenAI server; and killed mid-request to prove a dead server ends the session
with a recorded reason and the trajectory so far. The replay engine keeps it cheap (no second vLLM)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from harness.coscheduler import FCFS, CoScheduler
from harness.engine import server
from harness.engine.api import LLMRequest
from harness.engine.openai_http import OpenAIEngine
from harness.engine.recorded import Recording, ReplayEngine, Turn
from harness.events import Event, LLMFirstToken, SessionEnd, SessionStart, TrajectoryWriter, read_trajectory
from harness.gateway import serving
from harness.session import Session, SessionConfig
from sandbox import Workspace
from tests.helpers import ROOT, make_calc_repo
from tools import default_tools


@pytest.fixture(autouse=True)
def private_runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The state file in a private runtime directory, for this process and the servers it starts."""
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))


def tao(*args: str) -> subprocess.CompletedProcess[str]:
    """Run `tao ARGS` with this tree's code."""
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})


def script(tmp_path: Path, *turns: str) -> Path:
    """A JSON turn script for the replay engine."""
    path = tmp_path / "turns.json"
    path.write_text(json.dumps({"turns": list(turns)}), encoding="utf-8")
    return path


async def answer(url: str) -> str:
    """The text of one streamed answer from the server at `url`."""
    engine = await OpenAIEngine.connect(url)
    try:
        request = LLMRequest(uuid.uuid4().hex, [{"role": "user", "content": "hi"}])
        chunks = [chunk async for chunk in engine.stream(request)]
    finally:
        await engine.close()
    return "".join(chunk.text for chunk in chunks)


async def test_serve_starts_reports_serves_and_stops_the_gateway(tmp_path: Path) -> None:
    started = tao("serve", "--engine", "replay", "--replay", str(script(tmp_path, "hello there", "again")),
                  "--policy", "fcfs")
    assert started.returncode == 0, started.stderr
    state = server.running_server()
    assert state is not None and started.stdout.strip() == state.url and state.model == "replay:turns.json"
    assert server.pid_alive(state.pid) and state.status == "ready"
    try:
        status = tao("serve", "--status")
        assert status.returncode == 0 and state.url in status.stdout and "policy fcfs" in status.stdout
        assert await answer(state.url) == "hello there"
        again = tao("serve", "--engine", "replay", "--replay", str(tmp_path / "turns.json"))
        assert again.returncode == 2 and "already runs" in again.stderr and "tao serve --stop" in again.stderr
    finally:
        stopped = tao("serve", "--stop")
    assert stopped.returncode == 0 and "stopped" in stopped.stderr
    assert not server.pid_alive(state.pid) and server.read_state() is None
    gone = tao("serve", "--status")
    assert gone.returncode == 1 and "no tao server" in gone.stderr


async def test_serve_with_upstream_passes_requests_to_another_openai_server(tmp_path: Path) -> None:
    upstream = CoScheduler(ReplayEngine(Recording([Turn("from upstream")])), FCFS())
    async with serving(upstream, "far-model") as url:
        started = await asyncio.to_thread(tao, "serve", "--upstream", url)
        assert started.returncode == 0, started.stderr
        state = server.running_server()
        assert state is not None and state.model == "far-model"
        try:
            assert await answer(state.url) == "from upstream"
        finally:
            await asyncio.to_thread(tao, "serve", "--stop")
    assert [r.action for r in upstream.records] == ["arrive", "admit", "end"]


async def test_server_killed_mid_request_ends_the_session_with_its_reason(tmp_path: Path) -> None:
    turns = script(tmp_path, "I will read the file first, then run the tests to see what fails. " * 4)
    started = tao("serve", "--engine", "replay", "--replay", str(turns), "--seconds-per-token", "0.2")
    assert started.returncode == 0, started.stderr
    state = server.running_server()
    assert state is not None
    engine = await OpenAIEngine.connect(state.url)
    trajectory = tmp_path / "run.jsonl"
    writer = TrajectoryWriter(trajectory)

    def kill_on_first_token(event: Event) -> None:
        writer.write(event)
        if isinstance(event, LLMFirstToken):
            os.killpg(state.pid, signal.SIGKILL)  # the gateway and its engine: its own process group

    session = Session("Fix add in calc/ops.py.", engine, Workspace(make_calc_repo(tmp_path)), default_tools(),
                      SessionConfig(max_steps=3, max_tokens=320), [kill_on_first_token])
    try:
        end = await session.run()
    finally:
        writer.close()
        await engine.close()
        server.stop_server(state)  # reaps it and clears the state file
    assert end.status == "error" and "stopped answering" in end.reason, end.reason
    events = read_trajectory(trajectory)
    assert isinstance(events[0], SessionStart) and any(isinstance(e, LLMFirstToken) for e in events)
    assert isinstance(events[-1], SessionEnd) and events[-1].reason == end.reason
    assert server.running_server() is None  # a later `tao run` starts in-process instead



def test_serve_in_the_foreground_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    turns = script(tmp_path, "hello")
    # SIGINT as a terminal's Ctrl+C delivers it (the shell that runs pytest may have it ignored: reset it)
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "serve", "--foreground", "--engine", "replay",
                             "--replay", str(turns)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        state = server.running_server()
        assert state is not None and state.url == url and server.pid_alive(state.pid)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and "stopping the server" in err, err
    assert not server.pid_alive(state.pid) and server.read_state() is None


def test_bad_pacing_flags_are_refused_before_the_server_starts(tmp_path: Path) -> None:
    """`tao serve --knee 0` fails at once, naming the flag and what it must be, and leaves no server behind."""
    for flag, value in (("--knee", "0"), ("--max-wait", "-1")):
        refused = tao("serve", "--engine", "replay", "--replay", str(script(tmp_path, "hi")), flag, value)
        assert refused.returncode == 2, refused.stderr
        assert f"tao: bad pacing flag: {flag} {value} (expected " in refused.stderr
        assert "starting the tao server" not in refused.stderr and "Traceback" not in refused.stderr
        status = tao("serve", "--status")
        assert status.returncode == 1 and "no tao server" in status.stdout + status.stderr
    fcfs = tao("serve", "--engine", "replay", "--replay", str(tmp_path / "turns.json"), "--policy", "fcfs",
               "--knee", "0")
    try:
        assert fcfs.returncode == 0, fcfs.stderr  # fcfs has no knee: the flag does not apply to it
    finally:
        tao("serve", "--stop")
