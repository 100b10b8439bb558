"""The analyzer adapts to the user's own past Tao sessions before a new one starts."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

from harness.bench import fuzz_traces
from harness.bench.fuzz_traces_seeds import builtin_seeds, mutate
from harness.events import SessionStart
from harness.calls.canonical import canonical
from harness.speculation.prediction.pattern_model import PatternModel
from harness.speculation.prediction.past import past_sessions
from harness.speculation.prediction.patterns import Analyzer
from harness.speculation.prediction.training import adapt
from harness.traces.common import Imported, write_session
from tests.helpers import EXAMPLES, ROOT, make_calc_repo
from tests.test_patterns_dataflow import Script, analyzer_after

SUITE = canonical("run_tests", {}).key


def targeted_then_suite(n: int, whole_suite: bool = True) -> Script:
    """A Tao session of this user: find, read, fix, run the fixed test, then the whole suite."""
    script = Script(f"Fix `f{n}` in pkg/mod{n}.py", session_id=f"past-{n}")
    script.step("grep", {"pattern": f"def f{n}", "path": "pkg"}, f"pkg/mod{n}.py:3:def f{n}():")
    script.step("read_file", {"path": f"pkg/mod{n}.py"}, f"1\tdef f{n}():\n2\t    return 1\n")
    script.step("edit_file", {"path": f"pkg/mod{n}.py", "old": "return 1", "new": "return 2"}, "edited")
    script.step("run_tests", {"command": f"python -m pytest -q tests/test_mod{n}.py -k f{n}"}, "1 passed")
    if whole_suite:
        script.step("run_tests", {}, "12 passed")
    return script


def test_past_sessions_teach_the_users_own_habit() -> None:
    now = targeted_then_suite(99, whole_suite=False)  # the targeted run just passed: what comes next?
    before = analyzer_after(now, PatternModel()).predict("a", k=3)
    assert before[0].key != SUITE
    model = PatternModel()
    assert adapt(model, (targeted_then_suite(n).events for n in range(6))) == 6
    after = analyzer_after(now, model).predict("a", k=3)
    assert after[0].key == SUITE


def test_adapting_stops_when_its_time_is_up() -> None:
    assert adapt(PatternModel(), (targeted_then_suite(n).events for n in range(6)), seconds=0.0) == 0


def test_past_sessions_are_the_newest_that_made_a_call(tmp_path: Path) -> None:
    folder = tmp_path / "trajectories"
    for n in range(3):
        path = write_session(Imported(f"past-{n}", "", "tao", targeted_then_suite(n).events), folder)
        os.utime(path, (1_000_000 + n, 1_000_000 + n))
    idle = Script(session_id="idle")
    write_session(Imported("idle", "", "tao", idle.events[:1]), folder)  # a session that ended before any call
    (folder / "damaged.jsonl").write_text("{not json\n", encoding="utf-8")
    found = list(past_sessions(folder, limit=2))
    assert [events[0].session_id for events in found] == ["past-2", "past-1"]
    assert len(list(past_sessions(folder))) == 3
    assert list(past_sessions(tmp_path / "nowhere")) == []
    assert list(past_sessions(folder, limit=0)) == []


def test_a_session_adapted_to_the_past_keeps_the_saved_model_unchanged(tmp_path: Path) -> None:
    model = PatternModel()
    path = model.save(tmp_path / "patterns.json")
    saved = path.read_text()
    adapted = PatternModel.load(path)
    adapt(adapted, (targeted_then_suite(n).events for n in range(3)))
    assert path.read_text() == saved
    assert Analyzer(adapted).ranker.weights != Analyzer(PatternModel.load(path)).ranker.weights


def damaged_newest(folder: Path, count: int = 40) -> None:
    """Tao trajectories damaged in every way the trace fuzzer knows, newer than anything else in `folder`,
    and things that are no files at all under trajectory names."""
    rng = random.Random(2)
    seed = dict(builtin_seeds())["tao-6.jsonl"]
    for n in range(count):
        damaged, _ = mutate(rng, seed)
        (folder / f"damaged-{n}.jsonl").write_bytes(damaged)
    (folder / "deep.jsonl").write_text('{"type": "session_start", "t": 0, "config": ' + "[" * 50_000 + "]" * 50_000)
    (folder / "not-utf8.jsonl").write_bytes(seed.replace(b"fix add", b"fix \xff\xfe add"))
    (folder / "wrong-types.jsonl").write_bytes(seed.replace(b'"arguments":{}', b'"arguments":[1]'))
    os.mkfifo(folder / "fifo.jsonl")  # read with no writer, it would block `tao run` forever
    (folder / "folder.jsonl").mkdir()
    (folder / "dangling.jsonl").symlink_to(folder / "nowhere")
    (folder / "loop.jsonl").symlink_to(folder / "loop.jsonl")
    for path in folder.iterdir():
        if path.name.startswith(("damaged", "deep", "not-utf8", "wrong")):
            os.utime(path, (2_000_000_000, 2_000_000_000))


def test_corrupt_newest_sessions_are_skipped_and_the_good_ones_still_taken(tmp_path: Path) -> None:
    folder = tmp_path / "trajectories"
    for n in range(3):
        path = write_session(Imported(f"past-{n}", "", "tao", targeted_then_suite(n).events), folder)
        os.utime(path, (1_000_000 + n, 1_000_000 + n))
    damaged_newest(folder)
    tally = fuzz_traces.Tally()  # counts an escaped exception or a hang as a crash
    found = fuzz_traces.guarded(tally, None, "past sessions", None, lambda: list(past_sessions(folder, limit=60)))
    assert tally.crashes == 0, tally.examples
    starts = [next(e for e in events if isinstance(e, SessionStart)) for events in found]
    assert [start.session_id for start in starts][-3:] == ["past-2", "past-1", "past-0"]
    assert fuzz_traces.guarded(tally, None, "adapt", None, lambda: adapt(PatternModel(), found)) == len(found)
    assert tally.crashes == 0, tally.examples


def test_tao_run_starts_beside_corrupt_past_sessions(tmp_path: Path) -> None:
    folder = tmp_path / "state" / "tao" / "trajectories"
    folder.mkdir(parents=True)
    damaged_newest(folder)
    repo = make_calc_repo(tmp_path)
    result = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--headless", "--engine", "replay",
                             "--replay", str(EXAMPLES / "calc.replay.json"), "--repo", str(repo),
                             "--trajectory", str(tmp_path / "run.jsonl")], cwd=ROOT, capture_output=True, text=True,
                            env={**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "damaged" not in result.stderr and "fifo" not in result.stderr
