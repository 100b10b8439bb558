"""The public transcripts of issue 25 (harness/traces/data/public) and the Codex CLI importer, on real files.

The data is split by project for learning and testing; these tests hold the split, the citations and the
licences to what the README promises, and read every file through the importers as `tao` does.
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

from harness.events import LLMEnd, SessionStart, ToolCall, ToolResult
from harness.traces import ImportReport, detect, load_sessions
from harness.traces.codex import to_tao_call

PUBLIC = Path(__file__).resolve().parents[1] / "harness" / "traces" / "data" / "public"
ROLLOUT = PUBLIC / "test" / "entireio-entire-graph" / "rollout-019e7db7-d89c-7070-b812-4435399bcd61.jsonl"


def sources() -> list[dict[str, str]]:
    with (PUBLIC / "SOURCES.tsv").open(encoding="utf-8") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def test_no_project_is_on_both_sides_and_every_file_is_cited_with_its_licence() -> None:
    rows = sources()
    files = {str(p.relative_to(PUBLIC)) for p in PUBLIC.rglob("*.jsonl")}
    assert {row["file"] for row in rows} == files
    sides: dict[str, set[str]] = {"learn": set(), "test": set()}
    for row in rows:
        sides[row["file"].split("/", 1)[0]].add(row["repository"])
        assert row["licence"] in ("MIT", "Unlicense") and row["commit"] and row["path"]
    assert sides["learn"] and sides["test"] and not sides["learn"] & sides["test"]
    for folder in {(PUBLIC / row["file"]).parent for row in rows}:
        assert (folder / "LICENSE").is_file(), f"{folder} holds no copy of its licence"


def test_every_public_file_is_recognised_and_read_without_losing_calls() -> None:
    report = ImportReport()
    sessions = list(load_sessions(PUBLIC, report=report))
    formats = Counter(s.format for s in sessions)
    assert formats["claude-code"] >= 30 and formats["codex"] >= 5 and set(formats) == {"claude-code", "codex"}
    assert not report.errors
    # the only skips: two calls whose session ended before their result came (the originals end so too)
    assert len(report.skipped) <= 3 and all("no tool_result recorded" in s or "no output" in s for s in report.skipped)
    calls = [e for s in sessions for e in s.events if isinstance(e, ToolCall)]
    assert len(calls) > 1200
    for session in sessions:
        start = session.events[0]
        assert isinstance(start, SessionStart) and start.repo.startswith(("/Users/", "/tmp/gh-issue-solver"))


def test_a_codex_rollout_becomes_bash_calls_with_exit_codes_and_measured_durations() -> None:
    assert detect(ROLLOUT) == "codex"
    report = ImportReport()
    (session,) = load_sessions(ROLLOUT, report=report)
    start = session.events[0]
    assert isinstance(start, SessionStart) and start.session_id == "019e7db7-d89c-7070-b812-4435399bcd61"
    assert start.tools == ["bash"]  # Codex CLI has no finish tool: a text answer ends its task
    assert start.repo == "/Users/thomi/Projects/entire-sem" and start.task.startswith("Review the current branch")
    assert not report.skipped
    calls = [e for e in session.events if isinstance(e, ToolCall)]
    results = {e.call_id: e for e in session.events if isinstance(e, ToolResult)}
    assert Counter(c.name for c in calls) == {"bash": 26, "write_stdin": 4}
    assert calls[0].arguments["command"].startswith("git status --short")
    assert all(results[c.call_id].duration > 0 for c in calls)
    assert results[calls[0].call_id].exit_code == 0 and "Process exited" in results[calls[0].call_id].output
    # the model's first turn asked for three commands at once: one llm_end, then the three calls
    first_end = next(i for i, e in enumerate(session.events) if isinstance(e, LLMEnd))
    assert [e.name for e in session.events[first_end + 1:first_end + 7] if isinstance(e, ToolCall)] == ["bash"] * 3


def test_codex_calls_map_to_tao_calls_where_they_amount_to_one() -> None:
    assert to_tao_call({"type": "function_call", "name": "shell",
                        "arguments": '{"command": ["bash", "-lc", "go test ./..."]}'}) == \
        ("bash", {"command": "go test ./..."})
    assert to_tao_call({"type": "local_shell_call", "action": {"type": "exec", "command": ["ls", "-la"]}}) == \
        ("bash", {"command": "ls -la"})
    script = 'const r = await tools.exec_command({cmd:"cargo test -p core",workdir:"/w"}); text(r.output);'
    assert to_tao_call({"type": "custom_tool_call", "name": "exec", "input": script}) == \
        ("bash", {"command": "cargo test -p core"})
    poll = "const r = await tools.write_stdin({session_id:3,chars:\"\"}); text(r.output);"
    assert to_tao_call({"type": "custom_tool_call", "name": "exec", "input": poll}) == ("write_stdin", {"code": poll})
    assert to_tao_call({"type": "custom_tool_call", "name": "apply_patch", "input": "*** Begin Patch"}) == \
        ("apply_patch", {"patch": "*** Begin Patch"})
    assert to_tao_call({"type": "function_call", "name": "update_plan", "arguments": "{not json"}) == \
        ("update_plan", {"arguments": "{not json"})


def test_a_transcript_whose_first_kilobytes_hold_no_message_is_still_claude_code(tmp_path: Path) -> None:
    # As Claude Code 2.1 starts one: a resume pointer and a mode record, then a file snapshot of many kB
    transcript = next((PUBLIC / "test" / "link-foundation-meta-language").glob("7a6e5ba3*.jsonl"))
    session = transcript.stem
    snapshot = {"type": "file-history-snapshot", "messageId": "m1", "isSnapshotUpdate": False,
                "snapshot": {"trackedFileBackups": {f"src/f{i}.rs": {"version": 1} for i in range(400)}}}
    head = [{"type": "last-prompt", "leafUuid": "u1", "sessionId": session},
            {"type": "mode", "mode": "normal", "sessionId": session}, snapshot]
    path = tmp_path / transcript.name
    path.write_text("".join(json.dumps(r) + "\n" for r in head) + transcript.read_text(encoding="utf-8"),
                    encoding="utf-8")
    assert '"message"' not in path.read_text(encoding="utf-8")[:4096]
    assert detect(path) == "claude-code"
    report = ImportReport()
    (imported,) = load_sessions(path, report=report)
    assert imported.session_id == session and len([e for e in imported.events if isinstance(e, ToolCall)]) == 13
