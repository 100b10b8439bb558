"""Any trajectory file, never a crash: fuzzed files of every format, bad files beside good ones, the CLI on them.

The fuzzer is `tao bench fuzz-traces` itself, run here at a size that takes a few seconds.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from harness.bench import fuzz_traces
from harness.bench.fuzz_traces_seeds import builtin_seeds, mutate
from harness.events import read_trajectory
from harness.speculation.prediction.past import past_sessions
from harness.traces import ImportReport, load_sessions

DEEP = "[" * 100_000 + "]" * 100_000
SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"  # real trajectories, read in place


def bad_files() -> dict[str, str]:
    """Files that each broke an importer, by name: what is wrong with them is in the comment."""
    mini = json.loads(dict(builtin_seeds())["calc-1.traj.json"])
    mini["info"]["config"]["environment"] = ["not", "an", "object"]
    history = json.loads(dict(builtin_seeds())["calc-4.traj"])
    history["history"][1]["tool_calls"] = "bash ls"
    return {
        "deep.traj.json": '{"messages": ' + DEEP + "}",  # nested deeper than the JSON reader recurses
        "bigint.traj": '{"trajectory": [{"action": "ls", "execution_time": ' + "9" * 5000 + "}]}",  # > 4300 digits
        "environment.traj.json": json.dumps(mini),  # an object expected, a list found
        "calls.traj": json.dumps(history),  # a list of tool calls expected, a string found
        "list.jsonl": '{"type": "session_start", "t": 0, "session_id": "s", "task": "t", "repo": "/r", "engine": '
                      '"e", "tools": []}\n[1, 2]\n',  # a JSON line that is no object
        "number-id.jsonl": '{"type": "session_start", "t": 0, "session_id": 7, "task": "t", "repo": "/r", '
                           '"engine": "e", "tools": []}\n',  # a number where a string belongs
    }


def folder_with_bad_files(tmp_path: Path) -> Path:
    """One valid file of every format, and the bad files, in one folder."""
    folder = tmp_path / "traces"
    folder.mkdir()
    for name, data in builtin_seeds():
        (folder / name).write_bytes(data)
    for name, text in bad_files().items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def test_fuzzed_trajectory_files_never_crash_tao(capsys: pytest.CaptureFixture[str]) -> None:
    from harness.cli import main

    code = main(["bench", "fuzz-traces", "--files", "150", "--seed", "21", "--json"])
    result = json.loads(capsys.readouterr().out)
    assert result["crashes"] == 0, json.dumps(result["examples"], indent=1)
    assert result["unreported"] == 0 and result["folder_mismatches"] == 0
    assert result["files"] == 150 and result["imported"] > 10 and result["skipped"] > 10
    assert code == 0


@pytest.mark.skipif(not SHARED.is_dir(), reason=f"shared trajectories not found at {SHARED}")
def test_fuzzed_real_trajectories_never_crash_tao() -> None:
    result = fuzz_traces.run(files=60, seed=7, source=SHARED)
    assert result["config"]["seeds"] > len(builtin_seeds())  # real files of other agents among the seeds
    assert result["crashes"] == 0, json.dumps(result["examples"], indent=1)
    assert result["unreported"] == 0 and result["folder_mismatches"] == 0


def test_one_bad_file_never_stops_a_folder(tmp_path: Path) -> None:
    folder = folder_with_bad_files(tmp_path)
    report = ImportReport()
    sessions = list(load_sessions(folder, None, report))
    # What can be read is: a field of the wrong type counts as absent, a bad record or line is skipped.
    partly = {"environment.traj.json", "calls.traj", "list.jsonl"}
    assert {Path(s.source).name for s in sessions} == {name for name, _ in builtin_seeds()} | partly
    assert next(s for s in sessions if s.source.endswith("environment.traj.json")).events[0].repo == ""
    for name in bad_files().keys() - {"environment.traj.json"}:
        assert any(line.startswith(str(folder / name)) for line in report.skipped), (name, report.skipped)
    assert report.errors == []  # each was understood, not caught by the last-resort guard


@pytest.mark.parametrize("command", ["stats", "import", "learn"])
def test_traces_commands_finish_on_a_folder_with_bad_files(tmp_path: Path, command: str,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    from harness.cli import main

    folder = folder_with_bad_files(tmp_path)
    extra = {"stats": [], "import": ["--out", str(tmp_path / "out")],
             "learn": ["--out", str(tmp_path / "model.json"), "--epochs", "1"]}[command]
    assert main(["traces", command, str(folder), *extra]) == 0
    err = capsys.readouterr().err
    for name in ("deep.traj.json", "bigint.traj", "number-id.jsonl"):
        assert f"skipped {folder / name}" in err, err
    if command == "import":  # the seeds (Claude Code's has 2 sessions) and the 3 files read in part
        assert f"imported {len(builtin_seeds()) + 1 + 3} sessions" in err


def test_things_that_are_not_files_are_named_and_skipped(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)  # opened for reading with no writer, it would block forever
    (tmp_path / "folder.jsonl").mkdir()
    (tmp_path / "loop.traj").symlink_to(tmp_path / "loop.traj")
    for src in (fifo, tmp_path):
        for fmt in (None, "tao", "swe-agent"):
            report = ImportReport()
            sessions = fuzz_traces.guarded(
                fuzz_traces.Tally(), None, "import", None,
                lambda src=src, fmt=fmt, report=report: list(load_sessions(src, fmt, report)))
            assert sessions == [], (src, fmt)
            assert f"{fifo}: not a regular file but a FIFO" in report.skipped, report.skipped
            if src == tmp_path:
                assert any(line.startswith(f"{tmp_path / 'loop.traj'}: unreadable") for line in report.skipped)
    for path in (fifo, tmp_path / "folder.jsonl"):
        tally = fuzz_traces.Tally()  # counts what escapes, a hang included
        fuzz_traces.guarded(tally, None, "read", None, lambda path=path: read_trajectory(path))
        assert tally.examples[0]["error"].startswith(
            f"EventDecodeError: {path}: cannot read the trajectory (not a regular file"), tally.examples
    tally = fuzz_traces.Tally()
    assert fuzz_traces.guarded(tally, None, "past", None, lambda: list(past_sessions(tmp_path))) == []
    assert tally.crashes == 0, tally.examples


def test_the_fuzzer_damages_every_seed_in_many_ways() -> None:
    rng = random.Random(5)
    seen: set[str] = set()
    for _ in range(400):
        name, data = rng.choice(builtin_seeds())
        damaged, done = mutate(rng, data)
        seen.update(done)
        assert isinstance(damaged, bytes)
    assert seen == {"truncate", "flip", "lines", "bad-utf8", "bom", "newlines", "empty", "garbage", "nul", "structure"}
