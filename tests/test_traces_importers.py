"""Trajectory importers: real mini-swe-agent and SWE-agent samples, a Claude Code fixture, Tao's own files.

The real samples are read in place from ../shared/traces (skipped when absent); damaged or unknown
records must be reported and skipped, never fatal.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from harness import cli_traces
from harness.events import FormatError, LLMEnd, SessionEnd, SessionStart, ToolCall, ToolResult, read_trajectory
from harness.calls.canonical import canonical
from harness.traces import ImportReport, detect, load_sessions, write_session

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"
MINI = SHARED / "mini-swe-agent-gemini-3-pro-swebench-verified"
SWE = SHARED / "swe-agent-demonstrations"
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "claude_code_session.jsonl"
# Laid out as Claude Code 2.x writes a transcript: a record per content block, thinking, parallel calls,
# a subagent's records in the same file, meta records and slash-command echoes, a record written twice.
REALISTIC = Path(__file__).resolve().parent / "fixtures" / "claude_code_realistic.jsonl"
# As Claude Code 2.1 writes one: `progress` records of hooks and commands, and a subagent's messages wrapped in
# `agent_progress` records; Glob, Edit with replace_all, MultiEdit, TodoWrite.
PROGRESS = Path(__file__).resolve().parent / "fixtures" / "claude_code_progress.jsonl"
# mini-swe-agent 2 (format mini-swe-agent-1.1), written by hand: chat tool calls, and the Responses API.
MINI_V2 = [Path(__file__).resolve().parent / "fixtures" / f"mini_swe_agent_v2_{shape}.traj.json"
           for shape in ("toolcall", "response")]

needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason=f"shared trajectories not found at {SHARED}")


def only(src: Path, fmt: str | None = None) -> tuple[list, ImportReport]:
    report = ImportReport()
    return list(load_sessions(src, fmt, report)), report


def calls(events: list) -> list[ToolCall]:
    return [e for e in events if isinstance(e, ToolCall)]


@needs_shared
def test_mini_swe_agent_sample_becomes_bash_calls_with_observations() -> None:
    path = MINI / "astropy__astropy-13453.traj.json"
    assert detect(path) == "mini-swe-agent"
    (session,), report = only(path)
    events = session.events
    start, end = events[0], events[-1]
    assert isinstance(start, SessionStart) and start.repo == "/testbed" and start.session_id == "astropy__astropy-13453"
    assert "<pr_description>" not in start.task and start.task.strip()
    assert isinstance(end, SessionEnd) and end.status == "finished" and "diff --git" in end.submission
    made = calls(events)
    assert made[-1].name == "finish" and all(c.name == "bash" for c in made[:-1])
    results = [e for e in events if isinstance(e, ToolResult)]
    assert len(results) == len(made) - 1
    assert all(r.exit_code is not None for r in results) and "<returncode>" not in results[0].output
    assert all(b.t >= a.t for a, b in zip(events, events[1:]))
    assert not report.skipped


@needs_shared
def test_mini_swe_agent_long_outputs_keep_head_and_tail_and_count_the_cut() -> None:
    (session,), _ = only(MINI / "astropy__astropy-13398.traj.json")
    cut = [r for r in session.events if isinstance(r, ToolResult) and r.truncated_chars]
    assert cut and all("characters elided" in r.output for r in cut)


@needs_shared
def test_mini_swe_agent_answers_without_one_block_become_format_errors() -> None:
    found = False
    for path in sorted(MINI.glob("*.traj.json"))[:60]:
        (session,), _ = only(path)
        errors = [e for e in session.events if isinstance(e, FormatError)]
        if errors:
            found = True
            assert "EXACTLY ONE action" in errors[0].error
            break
    assert found, "the sample set has format errors in its first 60 files"


@needs_shared
@pytest.mark.parametrize("path", MINI_V2, ids=["toolcall", "response"])
def test_mini_swe_agent_2_reads_the_parsed_actions_whatever_the_message_shape(path: Path) -> None:
    assert detect(path) == "mini-swe-agent"
    (session,), report = only(path)
    assert report.skipped == []
    assert session.events[0].task == "`calc.add(2, 3)` returns -1 instead of 5."
    assert session.events[0].repo == "/testbed"
    made = calls(session.events)
    assert [c.arguments.get("command") for c in made[:-1]] == [
        "ls", "cat calc/ops.py", "python -m pytest tests/test_ops.py -q", "sed -i 's/a - b/a + b/' calc/ops.py",
        "python -m pytest tests/test_ops.py -q"]
    assert made[-1].name == "finish" and session.events[-1].submission.startswith("diff --git a/calc/ops.py")
    results = [e for e in session.events if isinstance(e, ToolResult)]
    assert results[1].output == "def add(a, b):\n    return a - b\n"  # the raw output, not the template around it
    assert [r.exit_code for r in results] == [0, 0, 1, 0, 0] and results[2].is_error
    assert [r.t for r in results] == [0.5, 4.0, 7.5, 11.0, 14.5]  # tool times from the messages' timestamps
    turns = [e for e in session.events if isinstance(e, LLMEnd)]
    assert turns[2].text == "Run the failing test." and turns[2].output_tokens > 0


def test_mini_swe_agent_2_format_errors_and_calls_left_unanswered(tmp_path: Path) -> None:
    (session,), _ = only(MINI_V2[0])
    assert [e.error for e in session.events if isinstance(e, FormatError)] == [
        "Tool call error: No tool calls found in the response."]
    data = json.loads(MINI_V2[0].read_text())
    data["messages"] = [m for m in data["messages"] if m.get("role") != "tool"][:4]  # no observation at all
    path = tmp_path / "cut.traj.json"
    path.write_text(json.dumps(data))
    (session,), report = only(path)
    assert calls(session.events)[0].arguments == {"command": "ls"}
    assert [r.is_error for r in session.events if isinstance(r, ToolResult)] == [True, True]
    assert sum("a command without an observation" in line for line in report.skipped) == 2


@needs_shared
def test_swe_agent_commands_map_to_tao_tools() -> None:
    path = SWE / ("replay__marshmallow-code__marshmallow-1867__function_calling__install-1"
                  "__marshmallow-code__marshmallow-1867.traj")
    assert detect(path) == "swe-agent"
    (session,), _ = only(path)
    made = calls(session.events)
    names = [c.name for c in made]
    assert names[0] == "write_file" and names[-1] == "finish"  # create reproduce.py ... submit
    assert ("bash", {"command": "python reproduce.py"}) in [(c.name, c.arguments) for c in made]
    opened = next(c for c in made if c.name == "read_file")
    assert opened.arguments["path"] == "src/marshmallow/fields.py" and opened.arguments["start_line"] <= 1474
    durations = [r.duration for r in session.events if isinstance(r, ToolResult)]
    assert all(d > 0 for d in durations)  # execution_time
    assert session.events[0].repo == "/testbed"


@needs_shared
def test_swe_agent_function_calling_history_is_read_when_there_are_no_steps() -> None:
    (session,), _ = only(SWE / "function_calling_simple.traj")
    made = calls(session.events)
    assert len(made) >= 3 and made[-1].name == "finish"
    assert any(c.name == "read_file" and c.arguments["path"] == "tests/missing_colon.py" for c in made)


def test_swe_agent_editor_calls_in_a_function_calling_history_keep_their_options(tmp_path: Path) -> None:
    def call(i: int, arguments: dict) -> dict:
        return {"role": "assistant", "content": "", "tool_calls": [
            {"id": f"c{i}", "function": {"name": "str_replace_editor", "arguments": json.dumps(arguments)}}]}

    history = [{"role": "user", "content": "ISSUE:\nadd() is wrong\nINSTRUCTIONS:\n..."},
               call(1, {"command": "view", "path": "/testbed"}),
               {"role": "tool", "content": "Here's the files and directories up to 2 levels deep in /testbed, ..."},
               call(2, {"command": "view", "path": "/testbed/calc/ops.py", "view_range": [1, 20]}),
               {"role": "tool", "content": "     1\tdef add(a, b):"},
               call(3, {"command": "str_replace", "path": "/testbed/calc/ops.py",
                        "old_str": "a - b", "new_str": "a + b"}),
               {"role": "tool", "content": "The file /testbed/calc/ops.py has been edited."}]
    path = tmp_path / "history.traj"
    path.write_text(json.dumps({"history": history, "info": {}}))
    (session,), _ = only(path)
    assert [(c.name, c.arguments) for c in calls(session.events)] == [
        ("list_files", {"path": "/testbed", "depth": 2}),
        ("read_file", {"path": "/testbed/calc/ops.py", "start_line": 1, "end_line": 20}),
        ("edit_file", {"path": "/testbed/calc/ops.py", "old": "a - b", "new": "a + b"})]
    assert session.events[0].task == "add() is wrong"


def test_claude_code_fixture_maps_tools_and_reports_damage() -> None:
    assert detect(FIXTURE) == "claude-code"
    (session,), report = only(FIXTURE)
    made = calls(session.events)
    assert [c.name for c in made] == ["bash", "read_file", "grep", "glob", "edit_file", "bash", "write_file"]
    assert made[1].arguments == {"path": "/home/dev/calc/calc/ops.py"}
    assert made[2].arguments == {"pattern": "def add", "path": "/home/dev/calc/calc"}
    assert made[3].effect == "unknown"
    assert session.events[0].repo == "/home/dev/calc" and "Fix add()" in session.events[0].task
    assert "finish" not in session.events[0].tools  # Claude Code ends a task with a text answer, not a call
    assert canonical("read_file", made[1].arguments, "/home/dev/calc").key == canonical(
        "bash", {"command": "cat calc/ops.py"}).key
    results = [e for e in session.events if isinstance(e, ToolResult)]
    assert results[0].is_error and "1 failed" in results[0].output
    assert results[1].t == pytest.approx(8.2)
    assert any("damaged JSON" in s for s in report.skipped)
    assert not any("progress" in s for s in report.skipped) and report.ignored == {"progress": 1}  # no calls in it
    turns = [e for e in session.events if isinstance(e, LLMEnd)]
    assert turns[0].text == "Let me run the failing test first." and turns[0].tool_calls


def test_claude_code_transcript_as_written_by_claude_code_2() -> None:
    assert detect(REALISTIC) == "claude-code"
    sessions, report = only(REALISTIC)
    assert report.skipped == []
    main, agent = sessions
    assert main.events[0].task.startswith("Cart.total() ignores the discount")  # not the caveat, not /clear
    assert [c.name for c in calls(main.events)] == ["grep", "read_file", "read_file", "bash", "todo_write", "task",
                                                    "edit_file", "bash"]
    assert agent.session_id == main.session_id + "-agent-a1b2c3d"
    assert [c.arguments for c in calls(agent.events)] == [{"pattern": "\\.discount", "path": "/home/dev/shop"}]
    assert agent.events[0].task == "Search the repo for other uses of .discount"
    turns = [e for e in main.events if isinstance(e, LLMEnd)]
    assert turns[0].text.startswith("The user says Cart.total ignores the discount")  # thinking is reasoning
    assert "I should find where total is defined" in turns[0].text
    third = turns[2]  # thinking, text and two tool uses, each in a record of its own
    assert third.text.index("run them at the same time") < third.text.index("I'll look at the tests")
    assert len(third.tool_calls) == 2
    results = [e for e in main.events if isinstance(e, ToolResult)]
    assert len(results) == 8 and results[3].is_error and "1 failed" in results[3].output
    assert sum("has been updated" in r.output for r in results) == 1  # the record written twice counts once


def test_claude_code_2_progress_records_are_a_subagents_session_or_left_out_quietly() -> None:
    (main, agent), report = only(PROGRESS)
    assert report.skipped == []
    assert report.ignored == {"progress": 3}  # two hooks' and a command's progress: nothing to import, only counted
    made = calls(main.events)
    assert [c.name for c in made] == ["glob", "task", "edit_file", "edit_file", "todo_write"]
    assert made[2].arguments == {"path": "/home/dev/shop/shop/export.py", "old": '"price"',
                                 "new": '"price", "discount"', "replace_all": True}
    assert made[3].arguments == {"path": "/home/dev/shop/tests/test_export.py", "edits": [
        {"old": "a", "new": "b"}, {"old": "c", "new": "d", "replace_all": True}]}
    assert made[2].effect == made[3].effect == "mutating"
    assert canonical(made[2].name, made[2].arguments, "/home/dev/shop").kind == "edit"
    assert agent.session_id == main.session_id + "-agent-e5f6"  # as a subagent's isSidechain records are
    assert agent.events[0].task == "Where is the discount column named?"
    (grep,) = calls(agent.events)
    assert grep.name == "grep" and grep.arguments == {"pattern": "discount", "path": "/home/dev/shop/shop"}
    (found,) = [e for e in agent.events if isinstance(e, ToolResult)]
    assert "COLUMNS" in found.output


def test_stats_counts_records_without_calls_once_and_names_every_tool_in_taos_words(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from harness.cli import main

    assert main(["traces", "stats", str(PROGRESS.parent), "--json"]) == 0
    captured = capsys.readouterr()
    assert "unknown record type 'progress'" not in captured.err
    stats = json.loads(captured.out)
    assert stats["ignored_records"]["progress"] >= 4
    assert not [name for name in stats["canonical_tools"] if name != name.lower()]  # Edit, Glob, TodoWrite: gone
    assert main(["traces", "stats", str(PROGRESS)]) == 0
    err = capsys.readouterr().err
    assert err.count("left out 3 records that hold no tool calls (3 progress)") == 1 and "skipped" not in err


def test_claude_code_call_without_result_is_reported(tmp_path: Path) -> None:
    record = {"type": "assistant", "sessionId": "s1", "uuid": "a", "timestamp": "2026-01-01T00:00:00Z",
              "message": {"role": "assistant", "content": [
                  {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}]}}
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps(record) + "\n")
    (session,), report = only(path, "claude-code")
    assert calls(session.events)[0].arguments == {"command": "ls"}
    assert any("no tool_result" in s for s in report.skipped)


def test_tao_trajectories_round_trip_and_damaged_lines_are_skipped(tmp_path: Path) -> None:
    (session,), _ = only(FIXTURE)
    written = write_session(session, tmp_path / "out")
    assert read_trajectory(written) == session.events
    lines = written.read_text().splitlines()
    lines.insert(3, "{not json")
    lines.insert(5, json.dumps({"type": "spec_launch", "t": 1.0, "key": "x"}))
    written.write_text("\n".join(lines) + "\n")
    assert detect(written) == "tao"
    (again,), report = only(written)
    assert [e for e in again.events if e.type != "unknown"] == session.events
    assert any("damaged event" in s for s in report.skipped) and any("spec_launch" in s for s in report.skipped)


def test_unreadable_and_foreign_files_never_stop_an_import(tmp_path: Path) -> None:
    (tmp_path / "broken.traj.json").write_text("{ truncated")
    (tmp_path / "notes.traj").write_text("[1, 2]")
    (tmp_path / "other.json").write_text("{}")
    sessions, report = only(tmp_path)
    assert sessions == []
    assert any("broken.traj.json" in s for s in report.skipped)
    assert any("notes.traj" in s for s in report.skipped)


def test_cli_import_and_stats(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    cli_traces.register(parser.add_subparsers())
    args = parser.parse_args(["traces", "import", "--from", "claude-code", str(FIXTURE), "--out", str(tmp_path)])
    assert args.func(args) == 0
    (out,) = tmp_path.glob("*.jsonl")
    assert read_trajectory(out)[0].type == "session_start"
    args = parser.parse_args(["traces", "stats", str(tmp_path), "--json"])
    assert args.func(args) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["sessions"] == 1 and stats["calls"] == 7 and stats["kinds"]["test"] == 2


def test_import_writes_to_out_as_learn_does_and_the_old_to_still_works(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from harness.cli import build_parser, main

    assert main(["traces", "import", str(FIXTURE), "--out", str(tmp_path / "new")]) == 0
    assert len(list((tmp_path / "new").glob("*.jsonl"))) == 1 and "--to" not in capsys.readouterr().err
    assert main(["traces", "import", str(FIXTURE), "--to", str(tmp_path / "old")]) == 0
    assert len(list((tmp_path / "old").glob("*.jsonl"))) == 1 and "--to is now --out" in capsys.readouterr().err
    assert main(["traces", "import", str(FIXTURE)]) == 2 and "needs --out DIR" in capsys.readouterr().err
    helped = build_parser()._subparsers._group_actions[0].choices["traces"]  # type: ignore[union-attr]
    usage = helped._subparsers._group_actions[0].choices["import"].format_help()  # type: ignore[union-attr]
    assert "--out" in usage and "--to" not in usage


def test_cli_says_what_is_missing_and_what_it_looks_for(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from harness.cli import main

    assert main(["traces", "import", str(tmp_path / "nowhere"), "--out", str(tmp_path / "out")]) == 2
    assert "nowhere does not exist" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    for argv in (["traces", "stats", str(tmp_path / "empty")], ["traces", "learn", str(tmp_path / "empty")],
                 ["traces", "import", str(tmp_path / "empty"), "--out", str(tmp_path / "out")]):
        assert main(argv) == 1, argv
        err = capsys.readouterr().err
        assert "no trajectories found in" in err and "Claude Code transcripts *.jsonl" in err, err
    assert main(["bench", "predict", "--train", str(tmp_path / "nowhere"), "--test", str(tmp_path / "empty")]) == 2
    assert not (tmp_path / "out").exists()


def test_a_tao_trajectory_that_talks_about_messages_is_still_tao(tmp_path: Path) -> None:
    (session,), _ = only(FIXTURE)
    session.events[0].task = 'the "message" field and the "sessionId" are wrong'
    path = write_session(session, tmp_path)
    assert detect(path) == "tao"
    session.events[0].task = "x" * 10_000
    assert detect(write_session(session, tmp_path)) == "tao"
