"""The event schema: JSON round trip, trajectory files that survive a crash, unknown types kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import events as ev


def sample_events() -> list[ev.Event]:
    return [
        ev.SessionStart(0.0, "abc", "fix it", "/repo", "replay", ["grep", "read_file"], {"max_steps": 3}, "2026-01-01T00:00:00+00:00"),
        ev.LLMStart(0.1, 1, "abc-1", 2),
        ev.LLMFirstToken(0.2, 1, "abc-1"),
        ev.LLMEnd(0.5, 1, "abc-1", "text <tool_call>{}</tool_call>", None, "stop", 100, 60, 12, 0.1, 0.3),
        ev.ToolCall(0.5, 1, "call_1_0", "grep", {"pattern": "déf"}, "pure"),
        ev.ToolResult(0.6, 1, "call_1_0", "grep", "a.py:1:déf", False, 0, 0, 0, 0.1),
        ev.FormatError(0.7, 2, "no call"),
        ev.SessionEnd(0.9, "finished", "the model called finish", "done", 2, "diff --git a b", 12),
    ]


def test_every_event_round_trips_through_json() -> None:
    for event in sample_events():
        data = json.loads(event.to_json())
        assert data["type"] == event.type and isinstance(data["t"], float)
        assert ev.from_dict(data) == event


def test_trajectory_file_reads_back_equal(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "run.jsonl"
    writer = ev.TrajectoryWriter(path)
    for event in sample_events():
        writer.write(event)
        # Flushed after every event: another reader sees it at once.
        assert ev.read_trajectory(path)[-1] == event
    writer.close()
    assert ev.read_trajectory(path) == sample_events()


def test_a_torn_last_line_is_skipped_but_earlier_damage_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    lines = [e.to_json() for e in sample_events()[:3]]
    path.write_text("\n".join(lines) + '\n{"type": "llm_end", "t": 0.4, "te')
    assert ev.read_trajectory(path) == sample_events()[:3]
    path.write_text(lines[0] + "\nnot json\n" + lines[1] + "\n")
    with pytest.raises(ev.EventDecodeError, match=":2:"):
        ev.read_trajectory(path)


def test_unknown_event_types_are_kept_verbatim() -> None:
    raw = {"type": "from_a_newer_tao", "t": 1.5, "candidate": "grep x"}
    event = ev.from_dict(raw)
    assert isinstance(event, ev.UnknownEvent)
    assert json.loads(event.to_json()) == raw


def test_events_without_type_or_time_are_rejected() -> None:
    with pytest.raises(ev.EventDecodeError):
        ev.from_dict({"t": 1})
    with pytest.raises(ev.EventDecodeError):
        ev.from_dict({"type": "tool_call"})


def test_strip_timing_drops_only_timing_fields() -> None:
    stripped = list(ev.strip_timing(sample_events()))
    assert all("t" not in item for item in stripped)
    assert stripped[5]["output"] == "a.py:1:déf" and "duration" not in stripped[5]


def test_fields_of_the_wrong_type_are_refused_with_the_field_named() -> None:
    call = ev.ToolCall(0.5, 1, "call_1", "read_file", {"path": "a.py"}, "pure").to_dict()
    assert ev.from_dict({**call, "t": 1}) == ev.ToolCall(1, 1, "call_1", "read_file", {"path": "a.py"}, "pure")
    for field_name, value in (("arguments", ["a.py"]), ("name", 7), ("step", "1"), ("step", True), ("call_id", None)):
        with pytest.raises(ev.EventDecodeError, match=f"wrong type for {field_name}"):
            ev.from_dict({**call, field_name: value})
    for t in (float("nan"), float("inf"), True, "0.5", 10**400):
        with pytest.raises(ev.EventDecodeError, match="finite number 't'"):
            ev.from_dict({**call, "t": t})
    with pytest.raises(ev.EventDecodeError, match="not a list"):
        ev.from_dict([call])  # type: ignore[arg-type]
    spec = ev.SpecSummary(1.0, 1, 1, 0, 0, 0.5, 0.0, {"read": {"promoted": 1}}).to_dict()
    with pytest.raises(ev.EventDecodeError, match="by_kind"):
        ev.from_dict({**spec, "by_kind": {"read": {"promoted": "1"}}})


def test_a_line_separator_inside_a_string_is_no_line_break(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    writer = ev.TrajectoryWriter(path)
    events = [*sample_events()[:5], ev.ToolResult(0.6, 1, "call_1_0", "grep", "a\u2028b\x85c\rd\x1ce", False, 0)]
    for event in events:
        writer.write(event)
    writer.close()
    assert ev.read_trajectory(path) == events
