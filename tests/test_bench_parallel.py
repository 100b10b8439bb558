"""`tao bench parallel` on a session of the bundled example: a turn of several reads is found in every mode, and
the one-by-one run splits each turn of several calls into turns of one, in the same order."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from harness.bench import parallel
from harness.bench import recordings as recorded
from harness.engine.recorded import Recording, Turn
from harness.protocol import CallParser

READS = [("read_file", {"path": "calc/ops.py"}), ("grep", {"pattern": "def "}), ("list_files", {"path": "calc"})]


def call(name: str, arguments: dict[str, object]) -> str:
    return f'<tool_call>{json.dumps({"name": name, "arguments": arguments})}</tool_call>'


def test_apart_gives_each_call_a_turn_of_its_own_in_order() -> None:
    several = Turn("Three reads.\n" + "\n".join(call(n, a) for n, a in READS))
    lone = Turn(call("finish", {"summary": "done"}))
    split = parallel.apart(Recording([several, lone], task="t")).turns
    assert len(split) == 4 and split[-1] == lone and split[0].text.startswith("Three reads.")
    parsed = []
    for turn in split[:3]:
        parser = CallParser()
        parser.feed(turn.text)
        parser.finish()
        parsed.append([(c.name, c.arguments) for c in parser.calls])
    assert parsed == [[read] for read in READS]


def test_a_turn_of_several_reads_is_timed_every_way(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    turns = ["Look first.\n" + call("list_files", {}), "Three at once.\n" + "\n".join(call(n, a) for n, a in READS),
             call("finish", {"summary": "looked"})]
    (sessions / "calc-look.json").write_text(json.dumps({"task": "Look around.", "repo": {"example": "calc"},
                                                          "turns": turns}))
    result = asyncio.run(parallel.run(recorded.load_sessions(sessions), 2, 0.001, tmp_path / "cache",
                                      progress=False))
    [turn] = result["turns"]
    assert (turn["session"], turn["step"], turn["calls"]) == ("calc-look", 2, 3)
    assert turn["sum_apart_s"] >= turn["slowest_apart_s"] > 0
    assert turn["together_s"] > 0 and turn["written_s"] >= 0
    assert "calc-look #2" in parallel.report(result).text()
