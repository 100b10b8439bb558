"""Importers take each call's measured tool time where the trace has one, and leave it unknown (0) where not.

Claude Code: `tool_use` record to `tool_result` record; mini-swe-agent 2: a one-command turn's stamp to its
observation's; SWE-agent: `execution_time`; Tao: its own `duration`, or a promoted speculation's run time.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.events import SessionStart, SpecPromote, ToolResult
from harness.traces import ImportReport, load_sessions, write_session
from harness.traces.common import MAX_DURATION, SessionBuilder, measured

FIXTURES = Path(__file__).resolve().parent / "fixtures"
REALISTIC = FIXTURES / "claude_code_realistic.jsonl"  # Claude Code 2.x: a record per block, two calls in a turn
MINI_V2 = FIXTURES / "mini_swe_agent_v2_toolcall.traj.json"


def imported(path: Path, fmt: str | None = None) -> list[Any]:
    """The sessions of one file, through the real importer (as `tao traces import` reads it)."""
    return list(load_sessions(path, fmt, ImportReport()))


def durations(session: Any) -> dict[str, float]:
    """Each result's duration by call id."""
    return {e.call_id: e.duration for e in session.events if isinstance(e, ToolResult)}


def test_measured_keeps_real_seconds_and_refuses_the_rest() -> None:
    assert measured(1.25) == 1.25 and measured(MAX_DURATION) == MAX_DURATION
    for value in (None, "1.0", True, -0.5, 0, MAX_DURATION + 1, float("nan"), float("inf"), 10**400):
        assert measured(value) == 0.0, value


def test_claude_code_each_call_from_its_tool_use_to_its_tool_result() -> None:
    main, agent = imported(REALISTIC)
    assert main.events[0].started_at == "2026-11-30T09:00:00.000+00:00"
    seconds = durations(main)
    assert seconds["toolu_01"] == pytest.approx(1.137)  # 09:00:05.685 -> 09:00:06.822
    # two calls of one turn, written at 12.644, answered at 13.781 and 16.192: each its own time
    assert seconds["toolu_03"] == pytest.approx(1.137) and seconds["toolu_04"] == pytest.approx(3.548)
    assert seconds["toolu_06"] == pytest.approx(5.822)  # the Task call spans its subagent's run
    assert seconds["toolu_02"] == 0.0  # answered in the same millisecond: no measurement, unknown
    assert durations(agent) == {"toolu_s1": pytest.approx(1.137)}


def record(kind: str, stamp: str, content: list[dict[str, Any]], uuid: str) -> dict[str, Any]:
    """A Claude Code 2.x transcript record (one content block a record, as it writes them)."""
    return {"parentUuid": None, "isSidechain": False, "userType": "external", "cwd": "/home/dev/api",
            "sessionId": "d0d0d0d0-1111-4222-8333-444455556666", "version": "2.0.76", "gitBranch": "main",
            "type": kind, "uuid": uuid, "timestamp": stamp,
            "message": {"role": kind, "content": content, **({"model": "claude-sonnet-4-5", "id": "msg_1"}
                                                             if kind == "assistant" else {})}}


def use(tool_id: str, name: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    """A tool_use block."""
    return {"type": "tool_use", "id": tool_id, "name": name, "input": tool_input}


def result(tool_id: str, text: str) -> dict[str, Any]:
    """A tool_result block."""
    return {"type": "tool_result", "tool_use_id": tool_id, "content": text}


def test_claude_code_times_out_of_order_late_or_missing_are_unknown(tmp_path: Path) -> None:
    records = [
        record("user", "2026-12-02T08:00:00.000Z", [{"type": "text", "text": "Why does GET /users 500?"}], "u1"),
        record("assistant", "2026-12-02T08:00:03.100Z", [use("t1", "Read", {"file_path": "/home/dev/api/app.go"})],
               "a1"),
        record("assistant", "2026-12-02T08:00:03.400Z", [use("t2", "Bash", {"command": "go test ./..."})], "a2"),
        record("assistant", "2026-12-02T08:00:03.500Z", [use("t3", "Grep", {"pattern": "func GetUsers"})], "a3"),
        record("user", "2026-12-02T08:00:03.300Z", [result("t1", "package main")], "u2"),
        record("user", "2026-12-02T08:00:01.000Z", [result("t2", "ok")], "u3"),  # a clock that went back
        {**record("user", "", [result("t3", "app.go:12")], "u4"), "timestamp": None},  # no time at all
        record("assistant", "2026-12-04T08:00:10.000Z", [use("t4", "Bash", {"command": "go vet ./..."})], "a4"),
        record("user", "2026-12-04T08:00:12.000Z", [result("t4", "")], "u5"),
        record("assistant", "2026-12-04T08:00:13.000Z", [use("t5", "Bash", {"command": "git diff"})], "a5"),
        record("user", "2026-12-06T09:00:13.000Z", [result("t5", "")], "u6"),  # over a day: a pause, not a tool
    ]
    path = tmp_path / "d0d0d0d0-1111-4222-8333-444455556666.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    (session,) = imported(path, "claude-code")
    assert durations(session) == {"t1": pytest.approx(0.2), "t2": 0.0, "t3": 0.0, "t4": pytest.approx(2.0),
                                  "t5": 0.0}


def test_mini_swe_agent_2_a_one_command_turn_is_timed_a_turn_of_several_is_not(tmp_path: Path) -> None:
    (session,) = imported(MINI_V2)
    assert set(durations(session).values()) == {0.5}  # each turn answered at t, its observation at t + 0.5
    assert session.events[0].started_at == "2025-11-24T16:00:03.000+00:00"
    data = json.loads(MINI_V2.read_text())
    turn, observation = data["messages"][2], data["messages"][3]
    turn["extra"]["actions"].append({"command": "cat README.md", "tool_call_id": "call_0b"})
    second = {**observation, "tool_call_id": "call_0b", "extra": {**observation["extra"], "raw_output": "# calc"}}
    data["messages"].insert(4, second)
    path = tmp_path / "two.traj.json"
    path.write_text(json.dumps(data))
    (session,) = imported(path)
    results = [e.duration for e in session.events if isinstance(e, ToolResult)]
    assert results[:2] == [0.0, 0.0]  # run one after the other and stamped together: only their sum is known
    assert results[2:] == [0.5] * 4


def test_swe_agent_takes_execution_time_where_it_is_a_real_duration(tmp_path: Path) -> None:
    times: list[Any] = [1.5, -3, "2.25", 1e9, None, True]
    steps = [{"action": f"ls dir{i}", "observation": "a.py", "thought": "Look around.", "execution_time": t}
             for i, t in enumerate(times)]
    path = tmp_path / "django__django-1.traj"
    path.write_text(json.dumps({"trajectory": steps, "history": [], "info": {}}))
    (session,) = imported(path)
    results = [e.duration for e in session.events if isinstance(e, ToolResult)]
    assert results == [1.5, 0.0, 2.25, 0.0, 0.0, 0.0]


def test_tao_own_durations_and_a_promoted_calls_run_time(tmp_path: Path) -> None:
    builder = SessionBuilder("tao-own", "fix add", "/work/calc", "tao", "2026-12-01T09:00:00+00:00")
    durations_in = {"c1": 1.25, "c2": 0.01, "c3": 0.002, "c4": 3 * MAX_DURATION}
    for call_id, seconds in durations_in.items():
        builder.turn("next", output_tokens=10)
        builder.call("read_file", {"path": f"calc/{call_id}.py"}, call_id)
        builder.result(call_id, "x = 1\n", duration=seconds)
    session = builder.end("finished", "done")
    session.events[-1:-1] = [SpecPromote(5.0, 2, "s1", "c2", 0.3, 0.01),  # ran 0.31 s, the call waited 0.01 s
                             SpecPromote.of_repeat(6.0, 3, "c3")]  # a real run's result: no time of its own
    # the builder refuses an absurd duration itself; a file written by Tao may still hold one
    result = next(e for e in session.events if isinstance(e, ToolResult) and e.call_id == "c4")
    result.duration = 3 * MAX_DURATION
    path = write_session(session, tmp_path)
    (again,) = imported(path, "tao")
    assert durations(again) == {"c1": 1.25, "c2": pytest.approx(0.31), "c3": 0.0, "c4": 0.0}
    assert isinstance(again.events[0], SessionStart) and again.events[0].started_at == "2026-12-01T09:00:00+00:00"
