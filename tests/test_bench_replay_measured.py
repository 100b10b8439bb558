"""The trace replay times each call by its measured duration where the trace has one, and says how many.

A replay of Claude Code transcripts used to report `measured_durations: 0`: the importer kept each result's
time on the clock but not as the call's duration. Read here from a transcript laid out as Claude Code 2.x
writes one (tests/fixtures/claude_code_realistic.jsonl), through the real importer and the real command.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.bench.replay.trace import build
from harness.cli import main
from harness.events import ToolResult
from harness.speculation.prediction.latency import modelled_latency
from harness.traces import ImportReport, load_sessions

REALISTIC = Path(__file__).resolve().parent / "fixtures" / "claude_code_realistic.jsonl"
SHIPPED = Path(__file__).resolve().parents[1] / "harness" / "speculation" / "prediction" / "default_patterns.json.gz"


def test_a_claude_code_replay_times_calls_by_their_transcripts_timestamps() -> None:
    main_session, _ = load_sessions(REALISTIC, "claude-code", ImportReport())
    trace = build(main_session.session_id, main_session.events)
    recorded = {e.call_id: e.duration for e in main_session.events if isinstance(e, ToolResult)}
    for call in trace.all_calls():
        if recorded[call.call.call_id] > 0:
            assert call.measured and call.seconds == recorded[call.call.call_id]
        else:  # answered within the same millisecond: unknown, so modelled
            assert not call.measured and call.seconds == modelled_latency(call.action)
    assert sum(c.measured for c in trace.all_calls()) == 6  # of 8: toolu_02 and toolu_05 have no time of their own


def test_the_command_counts_measured_durations(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", "replay", "--traces", str(REALISTIC), "--model", str(SHIPPED), "--holdout", "1",
            "--tpot-ms", "10"]
    assert main([*argv, "--json"]) == 0
    accuracy = json.loads(capsys.readouterr().out)["accuracy"]
    assert accuracy["measured_durations"] == 7  # 6 of the main session's 8 calls, and its subagent's one
    assert accuracy["measured_share"] == pytest.approx(7 / 9)
    assert main(argv) == 0
    assert "measured tool durations: 7 calls (78%)" in capsys.readouterr().out
