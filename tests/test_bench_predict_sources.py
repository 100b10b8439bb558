"""`tao bench predict --sources`: each call of a hand-made session lands in the group an exact predictor could
know it from."""

from __future__ import annotations

from harness.bench.predict_sources import in_candidates, sources
from harness.speculation.prediction.pattern_model import PatternModel
from harness.traces import Imported
from tests.test_patterns_dataflow import Script


def session() -> Imported:
    script = Script(repo="/home/u/proj")
    script.bash("grep -rn parse src", "/home/u/proj/src/a.go:12:func parse() {}\n")  # new
    script.step("read_file", {"path": "/home/u/proj/src/a.go"}, "package a\n")  # a whole read of a named path
    script.step("read_file", {"path": "src/a.go", "start_line": 10, "end_line": 20}, "func parse() {}\n")  # a view
    script.step("edit_file", {"path": "src/a.go", "old": "{}", "new": "{ return }"}, "edited")  # new
    script.bash("go test ./src", "ok\n")  # a test run
    script.bash("git status --short", " M src/a.go\n")  # git
    script.bash("go test ./src", "ok\n")  # a repeat
    return Imported("s", "hand-made", "test", script.events)


def test_each_call_goes_to_the_first_group_it_fits() -> None:
    found = sources([session()])
    assert found["calls"] == 7
    assert found["by_kind"]["test"] == {"test": 1, "repeat": 1}
    assert found["by_kind"]["read"] == {"read_named": 1} and found["by_kind"]["view"] == {"view_named": 1}
    assert found["by_kind"]["git"] == {"git": 1}
    assert found["share"]["new"] == round(2 / 7, 4)


def test_the_candidates_of_an_empty_model_hold_the_repeat() -> None:
    assert 1 / 7 <= in_candidates(PatternModel(), [session()]) <= 1.0
