"""Learning patterns from trajectories, online learning, the saved model, and `tao bench predict`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from harness import cli_traces
from harness.bench import predict
from harness.events import Event
from harness.calls.canonical import canonical_bash
from harness.speculation.prediction.controlflow import WordModel
from harness.speculation.prediction.pattern_model import PatternModel
from harness.speculation.prediction.patterns import Analyzer
from harness.speculation.prediction.training import learn
from harness.traces import load_sessions, write_session
from tests.test_patterns_dataflow import Script

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"
MINI = SHARED / "mini-swe-agent-gemini-3-pro-swebench-verified"


def habit_session(n: int) -> list[Event]:
    """An agent with habits: list, write a script, run it, edit, run it again, view the diff."""
    script = Script(f"Fix bug {n} in `pkg/mod{n}.py`", session_id=f"session-{n}")
    script.bash("ls -la", "pkg\nsetup.py\n")
    script.bash(f"cat pkg/mod{n}.py", "def f():\n    return 1\n")
    script.bash(f"cat <<'EOF' > repro{n}.py\nimport pkg\nEOF", "")
    script.bash(f"python repro{n}.py", "Traceback (most recent call last):\nValueError", 1)
    script.bash(f"sed -i 's/1/2/' pkg/mod{n}.py", "")
    script.bash(f"python repro{n}.py", "ok")
    script.bash("git diff", "diff --git a/pkg")
    return script.events


def test_learned_habits_rank_first(tmp_path: Path) -> None:
    model = learn([habit_session(n) for n in range(12)], epochs=2)
    analyzer = Analyzer(model)
    hits = 0
    events = habit_session(99)
    from harness.speculation.prediction.rehearsal import replay

    decisions = replay(analyzer, events)
    hits = sum(d.predictions["a"][0].key == d.action.key for d in decisions)
    assert decisions[0].predictions["a"][0].key == canonical_bash("ls -la").key
    assert decisions[3].predictions["a"][0].key == canonical_bash("python repro99.py").key  # run what was written
    assert decisions[5].predictions["a"][0].key == canonical_bash("python repro99.py").key  # re-run after the edit
    assert hits >= 4


def test_the_model_survives_a_round_trip(tmp_path: Path) -> None:
    model = learn([habit_session(n) for n in range(4)], epochs=1)
    path = model.save(tmp_path / "patterns.json")
    loaded = PatternModel.load(path)
    assert path.stat().st_size < 2_000_000
    events = habit_session(7)
    from harness.speculation.prediction.rehearsal import replay

    first = [[c.key for c in d.predictions["b"]] for d in replay(Analyzer(model), events)]
    second = [[c.key for c in d.predictions["b"]] for d in replay(Analyzer(loaded), events)]
    assert first == second
    data = json.loads(path.read_text())
    data["version"] = 999
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError):
        PatternModel.load(path)


def test_online_learning_adapts_within_a_session_without_touching_the_shared_model() -> None:
    model = PatternModel()
    before = json.dumps(model.to_json(), sort_keys=True)
    script = Script()
    for n in range(6):
        script.bash(f"cat <<'EOF' > t{n}.py\nx\nEOF")
        script.bash(f"python t{n}.py", "ok")
    analyzer = Analyzer(model)
    from harness.speculation.prediction.rehearsal import replay

    decisions = replay(analyzer, script.events)
    runs = [d for d in decisions if d.action.kind == "script"]
    assert runs[-1].predictions["a"][0].key == runs[-1].action.key
    assert json.dumps(model.to_json(), sort_keys=True) == before


def test_bench_reports_every_required_number(tmp_path: Path) -> None:
    train, test = tmp_path / "train", tmp_path / "test"
    for n in range(6):
        (train if n < 4 else test).mkdir(exist_ok=True)
        session = next(iter(load_sessions(_write(habit_session(n), tmp_path / f"raw{n}"))))
        write_session(session, train if n < 4 else test)
    parser = argparse.ArgumentParser()
    predict.register(parser.add_subparsers())
    args = parser.parse_args(["predict", "--train", str(train), "--test", str(test), "--json", "--epochs", "1"])
    result = predict.run(args.train, args.test, k=args.k, epochs=args.epochs)
    assert result["actions"] == 14
    for moment in "abc":
        assert 0 <= result["moments"][moment]["top1"] <= result["moments"][moment]["top3"] <= 1
    assert 0 <= result["slow"]["a"]["top3"] <= 1 and 0 <= result["latency_covered_top3"] <= 1
    assert result["decision_ms_p50"] > 0 and "script" in result["by_kind"]
    assert "latency covered" in predict.report(result).text()


def test_same_directory_is_split_by_instance(tmp_path: Path) -> None:
    for n in range(20):
        write_session(next(iter(load_sessions(_write(habit_session(n), tmp_path / f"raw{n}")))), tmp_path / "all")
    train, test = predict.split(tmp_path / "all", tmp_path / "all", 0.3, predict.ImportReport())
    assert train and test and not {s.session_id for s in train} & {s.session_id for s in test}
    assert {s.session_id for s in test} == {s.session_id for s in train + test if predict.held_out(s.session_id, 0.3)}


@pytest.mark.skipif(not MINI.is_dir(), reason=f"shared trajectories not found at {MINI}")
def test_bench_runs_on_real_trajectories() -> None:
    files = sorted(MINI.glob("*.traj.json"))
    sessions = [s for f in files[:10] for s in load_sessions(f)]
    model = learn([s.events for s in sessions[:8]], epochs=1)
    result = predict.evaluate(model, sessions[8:])
    assert result["actions"] > 20 and result["moments"]["c"]["top3"] > 0


def _write(events: list[Event], folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "session.jsonl"
    path.write_text("".join(e.to_json() + "\n" for e in events))
    return path


def test_cli_learn_writes_a_model_the_analyzer_loads(tmp_path: Path) -> None:
    for n in range(3):
        write_session(next(iter(load_sessions(_write(habit_session(n), tmp_path / f"raw{n}")))), tmp_path / "runs")
    parser = argparse.ArgumentParser()
    cli_traces.register(parser.add_subparsers())
    out = tmp_path / "cache" / "patterns.json"
    args = parser.parse_args(["traces", "learn", str(tmp_path / "runs"), "--out", str(out), "--epochs", "1"])
    assert args.func(args) == 0
    model = PatternModel.load(out)
    assert model.sessions == 3 and Analyzer(model).predict("a")


def test_runners_and_file_in_hand_rates_are_learned_and_saved(tmp_path: Path) -> None:
    sessions = []
    for n in range(4):
        script = Script(session_id=f"runner-{n}")
        script.bash(f"python3 tests/runtests.py app{n}.tests", "OK")
        for name in ("helper", "grow", "shrink", "value", "total"):  # (20 cases in all: enough to learn a rate)
            script.bash(f"grep -n {name} pkg/mod{n}.py", f"3:def {name}():\n")
            script.bash(f"sed -n '3,9p' pkg/mod{n}.py", f"def {name}():\n")
        script.bash(f"python3 tests/runtests.py app{n}", "OK")
        sessions.append(script.events)
    model = learn(sessions, epochs=1)
    runner = next(r for r in model.test_runners if "runtests" in r["runner"])
    assert runner["runner"] == "{python} tests/runtests.py" and runner["dotted"] is True
    rate, seconds = model.derive["search|same"]
    assert rate == 1.0 and seconds > 0  # after a grep in a file, the next call viewed that file
    loaded = PatternModel.load(model.save(tmp_path / "m.json"))
    assert loaded.test_runners == model.test_runners and loaded.derive == model.derive


def test_learning_cross_fits_the_ranker_and_copes_with_one_session() -> None:
    assert learn([habit_session(0)], epochs=1).sessions == 1
    model = learn([habit_session(n) for n in range(8)], epochs=1, folds=4)
    assert model.sessions == 8 and model.ranker.weights["a"]


def test_a_gzipped_model_is_the_same_bytes_every_time_and_loads_back(tmp_path: Path) -> None:
    model = learn([habit_session(n) for n in range(4)], epochs=1)
    first, second = model.save(tmp_path / "a.json.gz"), model.save(tmp_path / "b.json.gz")
    assert first.read_bytes() == second.read_bytes() and first.read_bytes()[:2] == b"\x1f\x8b"
    assert PatternModel.load(first).to_json() == model.to_json()


def test_tao_ships_a_learned_model_and_a_users_own_comes_first(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.launch import load_patterns
    from harness.speculation.prediction.pattern_model import SHIPPED_MODEL, default_model_path
    from harness.speculation.running.records import Budget

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    shipped = load_patterns(None)
    assert shipped.to_json() == PatternModel.load(SHIPPED_MODEL).to_json() and shipped.sessions == 313
    script = Script("tests/test_ops.py fails: fix add() in calc/ops.py.")
    script.step("run_tests", {"command": "python -m pytest tests/test_ops.py -q"}, "F\n1 failed", 1)
    script.step("read_file", {"path": "calc/ops.py"}, "def add(a, b):\n    return a - b\n")
    script.step("edit_file", {"path": "calc/ops.py", "old": "a - b", "new": "a + b"}, "ok")
    analyzer = Analyzer(shipped)
    for event in script.events:
        analyzer.observe(event)
    best = analyzer.predict("a", k=1)[0]  # after an edit, the failing test again: likely enough to be launched
    assert best.key == canonical_bash("python -m pytest tests/test_ops.py -q").key
    assert best.probability >= Budget().min_probability
    own = learn([habit_session(0), habit_session(1)], epochs=1)
    own.save(default_model_path())
    assert load_patterns(None).sessions == own.sessions == 2


def test_saved_word_counts_do_not_depend_on_the_order_the_words_were_met() -> None:
    """Words are met in a set's order, which changes with Python's hash seed; the saved model must not."""
    rows = {"grep": {"search": 3.0}, "read": {"read": 2.0}, "test": {"test": 5.0}}
    forward = WordModel(rows, {"search": 3.0, "read": 2.0, "test": 5.0})
    backward = WordModel(dict(reversed(list(rows.items()))), {"search": 3.0, "read": 2.0, "test": 5.0})
    assert json.dumps(forward.to_json()) == json.dumps(backward.to_json())
