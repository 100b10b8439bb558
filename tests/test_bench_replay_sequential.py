"""`tao bench replay --sequential`: a session is predicted by the shipped model adapted to its own project's
sessions that ended before it started, and to no other, as `tao run` adapts it.

The sessions are Claude Code 2.x transcripts written here (a record per content block, ISO timestamps), read by
the real importer; the model is the one Tao ships.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from harness.bench import replay
from harness.bench.replay import sequential
from harness.bench.replay.policies import BUDGET
from harness.cli import main
from harness.speculation.prediction.pattern_model import PatternModel
from harness.traces import ImportReport, load_sessions

SHIPPED = Path(replay.__file__).resolve().parents[2] / "speculation" / "prediction" / "default_patterns.json.gz"
DAY = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
# A Go service's habit: tests, the file they name, a grep, tests again, the diff.
GO = [("Bash", {"command": "go test ./..."}, "--- FAIL: TestGetUsers (0.00s)\n    users_test.go:14: got 500\nFAIL"),
      ("Read", {"file_path": "{cwd}/users.go"}, "package main\n\nfunc GetUsers() {}\n"),
      ("Grep", {"pattern": "GetUsers", "path": "{cwd}"}, "users.go\nusers_test.go"),
      ("Edit", {"file_path": "{cwd}/users.go", "old_string": "{}", "new_string": "{ return }"}, "updated"),
      ("Bash", {"command": "go test ./..."}, "ok  \texample.com/api\t0.012s"),
      ("Bash", {"command": "git diff"}, "diff --git a/users.go b/users.go")]


def transcript(folder: Path, name: str, cwd: str, start: datetime, calls: list[tuple[str, dict[str, Any], str]],
               task: str = "GET /users returns 500; fix it") -> Path:
    """A Claude Code transcript of one session: the task, then a call a turn, 2 s of thought and 1 s of tool each."""
    session_id = f"{name}-0000-4000-8000-000000000000"
    records: list[dict[str, Any]] = []

    def add(kind: str, at: datetime, content: Any) -> None:
        records.append({"parentUuid": records[-1]["uuid"] if records else None, "isSidechain": False,
                        "userType": "external", "cwd": cwd, "sessionId": session_id, "version": "2.0.76",
                        "type": kind, "uuid": f"{name}-{len(records)}",
                        "timestamp": at.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                        "message": {"role": kind, "content": content}})

    add("user", start, task)
    at = start
    for index, (tool, tool_input, output) in enumerate(calls):
        at += timedelta(seconds=2)
        filled = {k: v.replace("{cwd}", cwd) if isinstance(v, str) else v for k, v in tool_input.items()}
        add("assistant", at, [{"type": "text", "text": f"Next: {tool}."}])
        add("assistant", at, [{"type": "tool_use", "id": f"toolu_{name}_{index}", "name": tool, "input": filled}])
        at += timedelta(seconds=1)
        add("user", at, [{"type": "tool_result", "tool_use_id": f"toolu_{name}_{index}", "content": output}])
    add("assistant", at + timedelta(seconds=2), [{"type": "text", "text": "Fixed."}])
    path = folder / f"{name}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.fixture
def history(tmp_path: Path) -> Path:
    """One project's three sessions a day apart (named so that file order is not time order), one that overlaps
    the last, and another project's session in between."""
    api = "/home/dev/api"
    transcript(tmp_path, "zz-first", api, DAY, GO)
    transcript(tmp_path, "mm-second", api, DAY + timedelta(days=1), GO)
    transcript(tmp_path, "aa-third", api, DAY + timedelta(days=2), GO)
    transcript(tmp_path, "bb-overlap", api, DAY + timedelta(days=2) - timedelta(seconds=5), GO[:3])
    transcript(tmp_path, "cc-other", "/home/dev/web", DAY + timedelta(hours=30),
               [("Bash", {"command": "npm test"}, "1 failing"), ("Read", {"file_path": "{cwd}/app.js"}, "x")])
    return tmp_path


def sessions_of(folder: Path) -> dict[str, Any]:
    """The imported sessions by the name their file starts with."""
    return {s.session_id.split("-")[0] + "-" + s.session_id.split("-")[1]: s
            for s in load_sessions(folder, "claude-code", ImportReport())}


def test_earlier_is_the_same_projects_sessions_that_ended_before_newest_first(history: Path) -> None:
    found = sessions_of(history)
    spans = [sequential.span(s) for s in found.values()]
    named = {id(s.events): name for name, s in found.items()}

    def past(name: str) -> list[str]:
        return [named[id(events)] for events in sequential.earlier(found[name], spans)]

    assert past("zz-first") == []
    assert past("mm-second") == ["zz-first"]  # not cc-other: another project, though it ended in between
    assert past("aa-third") == ["mm-second", "zz-first"]  # newest first; bb-overlap still ran when it started
    assert past("bb-overlap") == ["mm-second", "zz-first"]
    assert past("cc-other") == []


def decisions(prepared: list[Any]) -> list[list[tuple[str, float]]]:
    """Every call's top candidates at (a) with their probabilities: what the model predicted."""
    return [[(c.key, round(c.probability, 9)) for c in call.decision.top("a", 5)]
            for p in prepared for call in p.trace.all_calls() if call.decision is not None]


def test_a_session_is_predicted_by_the_model_adapted_to_earlier_sessions_only(history: Path) -> None:
    found = sessions_of(history)
    ordered = [found[name] for name in ("zz-first", "mm-second", "aa-third")]
    model = PatternModel.load(SHIPPED)
    shipped = [replay.prepare(model, [s], BUDGET) for s in ordered]
    adapted, with_past = replay.adapted_runs(model, ordered, shipped, list(found.values()), BUDGET, "trace")
    first, second, third = ([p] for p in adapted)
    # Nothing came before the first: the shipped model's predictions, exactly. Had the later sessions (the same
    # habit, so a strong lesson) leaked into its model, they would differ as the later ones' do.
    assert decisions(first) == decisions(shipped[0])
    assert decisions(second) != decisions(shipped[1])
    # The second learned from the first alone: adapting to it by hand gives the same predictions.
    by_hand = sequential.adapted(PatternModel.load(SHIPPED), [ordered[0].events])
    assert decisions(second) == decisions(replay.prepare(by_hand, [ordered[1]], BUDGET))
    assert decisions(third) != decisions(second)
    assert with_past == 2
    assert decisions(replay.prepare(model, [ordered[0]], BUDGET)) == decisions(shipped[0])  # model left untouched


def test_the_command_reports_the_adapted_row_beside_the_shipped_model(history: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", "replay", "--traces", str(history), "--model", str(SHIPPED), "--holdout", "1",
            "--tpot-ms", "10", "--sequential"]
    assert main([*argv, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["sequential"]["sessions_with_past"] == 3  # second, third and the overlapping one
    assert set(result["sequential"]["accuracy"]) == set(result["accuracy"])
    entry = result["tpot_ms"]["10"]
    assert entry["sequential"]["mean"] > 0 and {"mean_reduction", "p99_reduction"} <= set(entry["sequential"])
    assert main(argv) == 0
    table = capsys.readouterr().out
    assert "Tao, adapted to the user" in table and "3 of 5 sessions had some" in table
