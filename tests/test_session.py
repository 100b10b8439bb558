"""A whole headless session: replayed model turns, real tools, a real git repository."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from harness.engine.replay import ReplayEngine, Recording, Turn, load_recording
from harness.events import (Event, FormatError, LLMEnd, SessionEnd, SessionStart, ToolCall, ToolResult,
                            TrajectoryWriter, read_trajectory)
from harness.session import Session, SessionConfig
from sandbox import Workspace
from tests.helpers import EXAMPLES, make_calc_repo
from tools import default_tools


async def run(repo: Path, turns: list[str] | Recording, config: SessionConfig = SessionConfig(),
              seconds_per_token: float = 0.0) -> tuple[SessionEnd, list[Event]]:
    recording = turns if isinstance(turns, Recording) else Recording([Turn(t) for t in turns])
    events: list[Event] = []
    session = Session("fix add", ReplayEngine(recording, seconds_per_token), Workspace(repo), default_tools(),
                      config, [events.append])
    return await session.run(), events


async def test_replayed_fix_ends_with_the_expected_diff(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    end, events = await run(repo, load_recording(EXAMPLES / "calc.replay.json"))
    assert end.status == "finished" and end.steps == 6
    assert "now returns a + b" in end.summary
    assert "-    return a - b\n+    return a + b" in end.submission
    assert end.submission.count("diff --git") == 1
    results = [e for e in events if isinstance(e, ToolResult)]
    assert [r.name for r in results] == ["run_tests", "grep", "read_file", "edit_file", "run_tests"]
    assert results[0].exit_code != 0 and results[-1].exit_code == 0
    assert results[3].workspace_version == 1  # the edit bumped the version
    assert (repo / "calc" / "ops.py").read_text().count("return a + b") == 1
    assert isinstance(events[0], SessionStart) and events[-1] is end
    assert all(b.t >= a.t for a, b in zip(events, events[1:]))


async def test_step_limit_ends_the_session_with_reason(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    call = '<tool_call>{"name": "list_files", "arguments": {}}</tool_call>'
    end, _ = await run(repo, [call] * 5, SessionConfig(max_steps=2))
    assert end.status == "limit" and "step limit of 2" in end.reason and end.steps == 2


async def test_format_errors_and_unknown_tools_are_told_to_the_model(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    turns = ["I think the answer is 5.",
             '<tool_call>{"name": "teleport", "arguments": {}}</tool_call>',
             '<tool_call>{"name": "read_file", "arguments": {"path": "../../etc/passwd"}}</tool_call>',
             '<tool_call>{"name": "finish", "arguments": {"summary": "gave up"}}</tool_call>']
    end, events = await run(repo, turns)
    assert end.status == "finished" and end.submission == ""
    [format_error] = [e for e in events if isinstance(e, FormatError)]
    assert "<tool_call>" in format_error.error
    unknown, escape = [e for e in events if isinstance(e, ToolResult)]
    assert unknown.is_error and "Unknown tool 'teleport'" in unknown.output and "read_file" in unknown.output
    assert escape.is_error and "outside the workspace" in escape.output


async def test_running_out_of_recorded_turns_is_an_engine_error(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    end, _ = await run(repo, ['<tool_call>{"name": "list_files", "arguments": {}}</tool_call>'])
    assert end.status == "error" and "all were replayed" in end.reason


async def test_wall_time_limit(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    end, _ = await run(repo, ["x " * 400], SessionConfig(max_seconds=0.2), seconds_per_token=0.01)
    assert end.status == "limit" and "wall-time" in end.reason


async def test_cancelled_session_still_records_its_end(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    path = tmp_path / "run.jsonl"
    writer = TrajectoryWriter(path)
    session = Session("t", ReplayEngine(Recording([Turn("x " * 2000)]), 0.01), Workspace(repo), default_tools(),
                      sinks=[writer.write])
    task = asyncio.create_task(session.run())
    await asyncio.sleep(0.3)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    writer.close()
    events = read_trajectory(path)
    assert isinstance(events[-1], SessionEnd) and events[-1].status == "interrupted"


async def test_native_tool_calls_replay(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    native = [{"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": json.dumps({"path": "calc/ops.py"})}}]
    finish = [{"id": "c2", "type": "function", "function": {"name": "finish", "arguments": '{"summary": "read"}'}}]
    end, events = await run(repo, Recording([Turn("", native), Turn("done", finish)]))
    assert end.status == "finished"
    [call] = [e for e in events if isinstance(e, ToolCall) and e.name == "read_file"]
    assert call.call_id == "c1"
    assert any(isinstance(e, LLMEnd) and e.tool_calls == native for e in events)
