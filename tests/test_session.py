"""A whole headless session: replayed model turns, real tools, a real git repository."""

from __future__ import annotations

import asyncio
import json
import random
import shutil
from pathlib import Path

from harness.bench.stream_gen import StreamGen, _nested
from harness.engine.recorded import ReplayEngine, Recording, Turn, load_recording
from harness.events import (Event, FormatError, LLMEnd, SessionEnd, SessionStart, SpecToggle, ToolCall, ToolResult,
                            TrajectoryWriter, comparable, read_trajectory)
from harness.session import Session, SessionConfig
from harness.speculation.prediction.pattern_model import SHIPPED_MODEL, PatternModel
from harness.speculation.prediction.patterns import Analyzer
from harness.speculation.prediction.state import MAX_PARTS, SessionState
from sandbox import Workspace
from tests.helpers import EXAMPLES, make_calc_repo
from tools import default_tools


async def run(repo: Path, turns: list[str] | Recording, config: SessionConfig | None = None,
              seconds_per_token: float = 0.0) -> tuple[SessionEnd, list[Event]]:
    recording = turns if isinstance(turns, Recording) else Recording([Turn(t) for t in turns])
    events: list[Event] = []
    session = Session("fix add", ReplayEngine(recording, seconds_per_token), Workspace(repo), default_tools(),
                      config or SessionConfig(), [events.append])
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
    assert end.status == "error" and "all were replayed" in end.reason and "without --replay" in end.reason


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
    native = [{"id": "c1", "type": "function",
               "function": {"name": "read_file", "arguments": json.dumps({"path": "calc/ops.py"})}}]
    finish = [{"id": "c2", "type": "function", "function": {"name": "finish", "arguments": '{"summary": "read"}'}}]
    end, events = await run(repo, Recording([Turn("", native), Turn("done", finish)]))
    assert end.status == "finished"
    [call] = [e for e in events if isinstance(e, ToolCall) and e.name == "read_file"]
    assert call.call_id == "c1"
    assert any(isinstance(e, LLMEnd) and e.tool_calls == native for e in events)


# -- any model output, never a crash ------------------------------------------------------------------------
# Each answer below once ended the session with an exception (status error, `tao run` exit 1). Now each bad
# call is answered with an error the model can read, and the model's own finish ends the session. These run
# with speculation on and the shipped pattern model, so the analyzer sees every hostile call too.

FINISH = '<tool_call>{"name": "finish", "arguments": {"summary": "done"}}</tool_call>'


def deep(levels: int) -> str:
    return "[" * levels + "]" * levels


async def hostile(repo: Path, turns: list[str] | Recording, path: Path | None = None
                  ) -> tuple[SessionEnd, list[Event], Session]:
    """Run a session over recorded turns with speculation on, events kept in memory (and in `path`)."""
    recording = turns if isinstance(turns, Recording) else Recording([Turn(t) for t in turns])
    events: list[Event] = []
    writer = TrajectoryWriter(path) if path is not None else None
    sinks = [events.append] + ([writer.write] if writer is not None else [])
    session = Session("fix add in calc/ops.py", ReplayEngine(recording), Workspace(repo), default_tools(),
                      sinks=sinks, analyzer=Analyzer(PatternModel.load(SHIPPED_MODEL)))
    try:
        end = await session.run()
    finally:
        if writer is not None:
            writer.close()
    return end, events, session


def told(events: list[Event]) -> list[str]:
    """What the model was told of its calls: every tool result and format error, in order."""
    return [e.output if isinstance(e, ToolResult) else e.error for e in events
            if isinstance(e, (ToolResult, FormatError))]


async def test_control_characters_in_a_tool_name_are_escaped_in_the_observation_and_events(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    raw = '<tool_call>{"name": "read\x1b[31m_file\x07", "arguments": {"path": "calc/ops.py"}}</tool_call>'
    escaped = '<tool_call>{"name": "gr\\u0000ep\\n", "arguments": {"pattern": "add"}}</tool_call>'
    end, events, _ = await hostile(repo, ["Let me read it. " + escaped, raw, FINISH], tmp_path / "t.jsonl")
    assert end.status == "finished"
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert [c.name for c in calls] == ["gr\\x00ep\\n", "finish"]
    [unknown] = [e for e in events if isinstance(e, ToolResult)]
    assert unknown.is_error and "Unknown tool 'gr\\x00ep\\n'" in unknown.output
    [invalid] = [e for e in events if isinstance(e, FormatError)]  # raw control characters are not JSON
    assert "Invalid control character" in invalid.error
    shown = "".join(e.to_json() for e in events if not isinstance(e, LLMEnd))  # llm_end keeps the raw answer
    assert "\x1b" not in shown and "\\u001b" not in shown and "\\u0000" not in shown
    assert read_trajectory(tmp_path / "t.jsonl")[-1].status == "finished"


async def test_deeply_nested_arguments_are_refused_with_a_reason(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    turns = ['<tool_call>{"name": "read_file", "arguments": {"path": ' + deep(5000) + "}}</tool_call>",
             '<tool_call>{"name": "grep", "arguments": "{\\"pattern\\": ' + deep(5000) + '}"}</tool_call>',
             '<tool_call>{"name": "list_files", "arguments": {"path": ' + deep(80) + "}}</tool_call>",
             FINISH]
    end, events, _ = await hostile(repo, turns, tmp_path / "t.jsonl")
    assert end.status == "finished"
    errors = told(events)
    assert len(errors) == 3 and all("levels deep" in error for error in errors)


async def test_numbers_json_does_not_allow_and_surrogates_are_refused(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    call = '<tool_call>{"name": "read_file", "arguments": {"path": "calc/ops.py", "start_line": %s}}</tool_call>'
    turns = [call % "Infinity", call % "NaN", call % "1e999", call % ("1" + "0" * 5000),
             '<tool_call>{"name": "read_file", "arguments": {"path": "calc/\\ud800ops.py"}}</tool_call>', FINISH]
    end, events, _ = await hostile(repo, turns, tmp_path / "t.jsonl")
    assert end.status == "finished"
    errors = told(events)
    assert len(errors) == 5
    assert "Infinity" in errors[0] and "NaN" in errors[1] and "1e999" in errors[2] and "5001 digits" in errors[3]
    assert "surrogate" in errors[4] and "\\ud800" in errors[4]


async def test_arguments_of_the_wrong_type_reach_the_tool_and_the_analyzer_without_a_crash(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    turns = ['<tool_call>{"name": "run_tests", "arguments": {"command": ["pytest", "-q"]}}</tool_call>',
             '<tool_call>{"name": "list_files", "arguments": {"path": 7, "depth": {"a": 1}}}</tool_call>',
             '<tool_call>{"name": "grep", "arguments": {"pattern": {"x": [1]}, "glob": [1]}}</tool_call>',
             '<tool_call>{"name": "bash", "arguments": {"command": 5}}</tool_call>',
             '<tool_call>{"name": "teleport", "arguments": {"to": {"x": [[1, 2], null]}}}</tool_call>', FINISH]
    end, events, _ = await hostile(repo, turns, tmp_path / "t.jsonl")
    assert end.status == "finished"
    results = [e for e in events if isinstance(e, ToolResult)]
    assert len(results) == 5 and all(r.is_error for r in results)


async def test_a_nul_byte_in_a_path_is_an_error_the_model_reads(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    turns = ["I will read calc/ops.py first.\n"
             + FINISH.replace('"finish", "arguments": {"summary": "done"}',
                              '"read_file", "arguments": {"path": "calc/\\u0000ops.py"}'),
             '<tool_call>{"name": "grep", "arguments": {"pattern": "add", "path": "calc\\u0000"}}</tool_call>',
             '<tool_call>{"name": "run_tests", "arguments": {"command": "pytest tests\\u0000"}}</tool_call>',
             '<tool_call>{"name": "bash", "arguments": {"command": "ls calc\\u0000"}}</tool_call>',
             FINISH]
    end, events, _ = await hostile(repo, turns, tmp_path / "t.jsonl")
    assert end.status == "finished"
    results = [e for e in events if isinstance(e, ToolResult)]
    assert len(results) == 4 and all(r.is_error for r in results[:3])  # the shell itself reads up to the NUL


async def test_a_bad_call_beside_a_good_one_is_still_answered(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    answer = ('<tool_call>{"name": "read_file", "arguments": {"path": "calc/ops.py"}}</tool_call>'
              '<tool_call>{"name": "grep", "arguments": {pattern: "add"}}</tool_call>')
    end, events, session = await hostile(repo, [answer, FINISH])
    assert end.status == "finished"
    kinds = [type(e).__name__ for e in events if isinstance(e, (ToolResult, FormatError))]
    assert kinds == ["ToolResult", "FormatError"]
    [error] = [e for e in events if isinstance(e, FormatError)]
    assert "not valid JSON" in error.error
    assert any(m["role"] == "user" and "not valid JSON" in m["content"] for m in session.messages)


async def test_a_lone_surrogate_in_the_answer_text_does_not_break_the_trajectory(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    turns = ["Thinking \ud800 about \udfff it.\n" + FINISH]
    end, events, _ = await hostile(repo, turns, tmp_path / "t.jsonl")
    assert end.status == "finished"
    [llm_end] = [e for e in read_trajectory(tmp_path / "t.jsonl") if isinstance(e, LLMEnd)]
    assert llm_end.text.startswith("Thinking \ufffd about \ufffd it.")


async def test_every_native_call_is_answered_even_a_malformed_one(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    calls = [{"id": "good", "type": "function",
              "function": {"name": "read_file", "arguments": '{"path": "calc/ops.py"}'}},
             {"id": "bad", "type": "function", "function": {"name": "grep", "arguments": '{"pattern": '}},
             {"id": "deep", "type": "function", "function": {"name": "grep", "arguments": deep(5000)}},
             "not a call"]
    finish = [{"id": "end", "type": "function", "function": {"name": "finish", "arguments": '{"summary": "ok"}'}}]
    end, events, session = await hostile(repo, Recording([Turn("", calls), Turn("done", finish)]), tmp_path / "t.jsonl")
    assert end.status == "finished"
    answered = [m["tool_call_id"] for m in session.messages if m["role"] == "tool"]
    assert answered == ["good", "bad", "deep", "call_3"]
    results = {e.call_id: e for e in events if isinstance(e, ToolResult)}
    assert not results["good"].is_error and results["bad"].is_error and "not valid JSON" in results["bad"].output
    assert "levels deep" in results["deep"].output and results["call_3"].is_error
    # The malformed calls' results are not taken for the good call's by the analyzer (they have no tool_call)
    [read] = [step for step in session.speculation.analyzer.state.steps if step.name == "read_file"]
    assert read.ok is True and "not valid JSON" not in str(read.mentions)


async def test_fuzzed_answers_end_with_the_models_finish(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    turns = []
    for index in range(24):
        case = StreamGen(random.Random(f"session:{index}")).answer()
        # bash and run_tests would run the fuzzed text as a command on this machine: ask grep instead
        turns.append(case.text.replace('"bash"', '"grep"').replace('"run_tests"', '"grep"')
                     .replace('"finish"', '"outline"'))
    end, events, _ = await hostile(repo, [*turns, FINISH], tmp_path / "t.jsonl")
    assert end.status == "finished" and end.steps == 25
    assert read_trajectory(tmp_path / "t.jsonl")[-1].status == "finished"


class BrokenAnalyzer(Analyzer):
    """Fault injection, the point of the test that uses it: an analyzer that fails while the session runs."""

    def __init__(self, fail_on: str) -> None:
        super().__init__(PatternModel.load(SHIPPED_MODEL))
        self.fail_on, self.seen = fail_on, 0

    def observe(self, event: Event) -> None:
        super().observe(event)
        if self.fail_on == "observe" and isinstance(event, ToolResult):
            raise RuntimeError("the analyzer broke on an observation")

    def predict(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.seen += 1
        if self.fail_on == "predict" and self.seen > 2:
            raise RuntimeError("the analyzer broke on a prediction")
        return super().predict(*args, **kwargs)


async def test_a_failing_analyzer_turns_speculation_off_and_changes_nothing_else(tmp_path: Path) -> None:
    recording = load_recording(EXAMPLES / "calc.replay.json")
    runs = []
    for fail_on in ("off", "observe", "predict"):
        shutil.rmtree(tmp_path / "w", ignore_errors=True)
        repo = make_calc_repo(tmp_path / "w")  # the same path each time: it is in the events
        events: list[Event] = []
        analyzer = None if fail_on == "off" else BrokenAnalyzer(fail_on)
        session = Session("fix add", ReplayEngine(recording), Workspace(repo), default_tools(), sinks=[events.append],
                          analyzer=analyzer)
        end = await session.run()
        assert end.status == "finished", (fail_on, end.reason)
        if analyzer is not None:
            assert any(isinstance(e, SpecToggle) and not e.enabled for e in events)
        runs.append([e for e in comparable(events) if e["type"] != "spec_toggle"])
    assert runs[1] == runs[0] and runs[2] == runs[0]


async def test_fuzzed_native_answers_end_with_the_models_finish(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    turns = []
    for index in range(16):
        case = StreamGen(random.Random(f"native:{index}")).native()
        for item in case.tool_calls if isinstance(case.tool_calls, list) else []:
            function = item.get("function") if isinstance(item, dict) else None
            if isinstance(function, dict) and function.get("name") in ("bash", "run_tests", "finish"):
                function["name"] = "grep"  # bash and run_tests would run fuzzed text as a command here
        turns.append(Turn(f"answer {index}", case.tool_calls if index % 4 else [{"id": "x", "function": {
            "name": "grep", "arguments": _nested(5000)}}, {"id": "y", "function": {"name": "grep", "arguments": 5}}]))
    finish = [{"id": "end", "type": "function", "function": {"name": "finish", "arguments": '{"summary": "ok"}'}}]
    end, events, session = await hostile(repo, Recording([*turns, Turn("", finish)]), tmp_path / "t.jsonl")
    assert end.status == "finished" and end.steps == 17
    assert read_trajectory(tmp_path / "t.jsonl")[-1].status == "finished"
    json.dumps(session.messages)  # what the next request would send


def test_a_path_thousands_of_folders_deep_is_not_taken_in_by_the_analyzer() -> None:
    # Each folder of such a path was checked against all the others: 10,000 levels took half a minute.
    state = SessionState()
    deep = "tests/" * 10_000 + "x.py"
    state.observe(ToolCall(0.0, 1, "c1", "edit_file", {"path": deep, "old": "a", "new": "b"}, "mutating"))
    state.observe(ToolResult(0.0, 1, "c1", "edit_file", f"edited {deep}", False, None, 0, 1, 0.0))
    state.observe(ToolCall(0.0, 2, "c2", "read_file", {"path": "tests/test_ops.py"}, "pure"))
    assert deep not in state.seen and "tests/test_ops.py" in state.seen
    assert all(place.count("/") <= MAX_PARTS for place in state.test_places)


class HintedReplay(ReplayEngine):
    """A replay engine that takes the session's tool-start hints, as Tao's client of `tao serve` does."""

    def __init__(self, recording: Recording) -> None:
        super().__init__(recording)
        self.expected: list[float | None] = []

    async def tool_started(self, expected: float | None) -> None:
        self.expected.append(expected)


async def test_a_calls_hint_is_the_duration_its_last_run_recorded(tmp_path: Path) -> None:
    call = '<tool_call>{"name": "list_files", "arguments": {}}</tool_call>'
    engine = HintedReplay(Recording([Turn(call), Turn(call), Turn(
        '<tool_call>{"name": "finish", "arguments": {"summary": "listed twice"}}</tool_call>')]))
    events: list[Event] = []
    session = Session("list", engine, Workspace(make_calc_repo(tmp_path)), default_tools(), sinks=[events.append])
    end = await session.run()
    for _ in range(10):  # the hints go out in the background
        await asyncio.sleep(0)
    first, second = [e for e in events if isinstance(e, ToolResult)]
    assert end.status == "finished" and len(engine.expected) == 2
    assert engine.expected[1] == first.duration > 0  # one number: what the trajectory records is what the hint says
