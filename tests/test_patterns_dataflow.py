"""Each data-flow rule on a hand-made session: the candidate it must produce, runnable and explained."""

from __future__ import annotations

from harness.events import Event
from harness.calls.canonical import canonical, canonical_bash
from harness.speculation.prediction.pattern_model import PatternModel
from harness.speculation.prediction.patterns import Analyzer, Candidate, Partial
from harness.traces.common import TAO_TOOLS, SessionBuilder

SOURCE = '''import os


def helper(x):
    return x + 1


class Box:
    def __init__(self, value):
        self.value = value

    def grow(self):
        total = self.value
        total += helper(total)
        return total
'''


class Script:
    """A session written by hand, one step at a time."""

    def __init__(self, task: str = "Fix it.", repo: str = "/repo", session_id: str = "s") -> None:
        self.builder = SessionBuilder(session_id, task, repo, "test", tools=TAO_TOOLS)

    def step(self, name: str, arguments: dict, output: str = "", exit_code: int | None = 0, text: str = "") -> None:
        self.builder.turn(text)
        call_id = self.builder.call(name, arguments)
        self.builder.result(call_id, output, exit_code, exit_code not in (0, None))

    def bash(self, command: str, output: str = "", exit_code: int = 0) -> None:
        self.step("bash", {"command": command}, output, exit_code)

    @property
    def events(self) -> list[Event]:
        return self.builder.events


def analyzer_after(script: Script, model: PatternModel | None = None, **options: object) -> Analyzer:
    analyzer = Analyzer(model or PatternModel(), **options)
    for event in script.events:
        analyzer.observe(event)
    return analyzer


def find(candidates: list[Candidate], key: str) -> Candidate | None:
    return next((c for c in candidates if c.key == key), None)


def candidate(script: Script, key: str, moment: str = "a", partial: Partial | None = None,
              **options: object) -> Candidate:
    found = find(analyzer_after(script, **options).predict(moment, partial, k=500), key)
    assert found is not None, f"no candidate {key}"
    return found


def read(path: str, start: int | None = None, end: int | None = None) -> str:
    return canonical("read_file", {"path": path, "start_line": start, "end_line": end}).key


def test_a_script_is_run_right_after_it_is_written() -> None:
    script = Script()
    script.step("write_file", {"path": "reproduce.py", "content": "print(1)\n"})
    found = candidate(script, canonical_bash("python reproduce.py").key)
    assert found.name == "bash" and found.arguments == {"command": "python reproduce.py"}
    assert "run_written" in found.reason and found.effect == "sandboxed" and found.kind == "script"


def test_the_agents_own_interpreter_is_used() -> None:
    script = Script()
    script.bash("python3 -c 'print(1)'")
    script.bash("cat <<'EOF' > check.py\nprint(2)\nEOF")
    assert "run_written" in candidate(script, canonical_bash("python3 check.py").key).reason


def test_the_last_test_command_is_rerun_after_an_edit() -> None:
    script = Script()
    script.bash("pytest tests/test_ops.py -q", "1 failed", 1)
    script.step("edit_file", {"path": "calc/ops.py", "old": "a - b", "new": "a + b"})
    found = candidate(script, canonical_bash("pytest tests/test_ops.py -q").key)
    assert found.name == "run_tests" and found.arguments == {"command": "pytest tests/test_ops.py -q"}
    assert "repeat" in found.reason and found.latency_saved > 1.0 and found.utility > 0


def test_paths_and_lines_in_grep_output_become_reads_and_views() -> None:
    script = Script()
    script.bash("grep -rn 'def grow' src", "src/box.py:12:    def grow(self):\n")
    analyzer = analyzer_after(script)
    candidates = analyzer.predict("a", k=500)
    assert "output_path" in find(candidates, read("src/box.py")).reason
    views = [c for c in candidates if c.reason.startswith("output_line")]
    assert views and all(c.arguments["path"] == "src/box.py"
                         and c.arguments["start_line"] <= 12 <= c.arguments["end_line"] for c in views)


def test_a_traceback_names_the_file_and_line() -> None:
    script = Script()
    script.bash("python reproduce.py", 'Traceback (most recent call last):\n  File "/repo/src/box.py", line 14, '
                "in grow\n    total += helper(total)\nTypeError: boom\n", 1)
    candidates = analyzer_after(script).predict("a", k=500)
    assert find(candidates, read("src/box.py")) is not None
    assert any(c.arguments.get("path") == "src/box.py" and c.arguments.get("start_line", 99) <= 14 for c in candidates)


def test_the_enclosing_function_comes_from_tree_sitter() -> None:
    script = Script()
    script.bash("cat src/box.py", SOURCE)
    script.bash("grep -n helper src/box.py", "src/box.py:14:        total += helper(total)\n")
    found = candidate(script, read("src/box.py", 12, 15))
    assert "enclosing_function" in found.reason and found.effect == "pure"


def test_the_enclosing_function_can_come_from_the_workspace() -> None:
    script = Script()
    script.bash("grep -n value src/box.py", "src/box.py:10:        self.value = value\n")
    texts = {"src/box.py": SOURCE}
    found = candidate(script, read("src/box.py", 9, 10), read_text=texts.get)
    assert "enclosing_function" in found.reason


def test_the_file_named_in_the_task_is_read() -> None:
    script = Script(task="`calc/ops.py` add() returns the wrong sign; see calc/ops.py:2")
    analyzer = analyzer_after(script)
    found = find(analyzer.predict("a", k=500), read("calc/ops.py"))
    assert found is not None and "task_path" in found.reason and found.name == "read_file"


def test_a_test_file_in_sight_is_run_with_the_sessions_runner() -> None:
    script = Script()
    script.bash("./tests/runtests.py queries", "OK")
    script.step("list_files", {"path": "tests/forms", "depth": 1}, "test_widgets.py\ntest_fields.py\n")
    key = canonical_bash("./tests/runtests.py forms.test_widgets").key
    assert "test_in_sight" in candidate(script, key).reason
    script = Script()
    script.bash("ls tests", "test_ops.py\n")
    assert "test_in_sight" in candidate(script, canonical_bash("pytest tests/test_ops.py").key).reason


def test_a_range_view_continues_with_the_next_block() -> None:
    script = Script()
    script.bash("nl -ba src/box.py | sed -n '1,10p'", "...")
    assert "next_block" in candidate(script, read("src/box.py", 11, 20)).reason


def test_scratch_files_are_cleaned_up_in_the_order_written() -> None:
    script = Script()
    script.step("write_file", {"path": "reproduce.py", "content": "1"})
    script.step("write_file", {"path": "check.py", "content": "2"})
    script.step("write_file", {"path": "reproduce.py", "content": "3"})
    found = candidate(script, canonical_bash("rm reproduce.py check.py").key)
    assert "cleanup_all" in found.reason and found.effect == "mutating" and found.utility < 0


def test_reasoning_names_files_lines_commands_and_symbols() -> None:
    script = Script()
    script.bash("ls src", "box.py\n")
    text = ("The bug is in `src/box.py`. Let me view lines 12-15 of src/box.py, then run `python check.py`, "
            "and search for `helper`.")
    partial = Partial(text)
    assert "reasoning_path" in candidate(script, read("src/box.py"), "b", partial).reason
    assert "reasoning_range" in candidate(script, read("src/box.py", 12, 15), "b", partial).reason
    assert "reasoning_command" in candidate(script, canonical_bash("python check.py").key, "b", partial).reason
    grep = canonical("grep", {"pattern": "def helper", "path": "src/box.py"}).key
    assert "reasoning_search" in candidate(script, grep, "b", partial).reason
    assert find(analyzer_after(script).predict("a", k=500), read("src/box.py", 12, 15)) is None


def test_moment_c_keeps_only_candidates_that_agree_with_the_call_begun() -> None:
    script = Script()
    script.bash("python reproduce.py", "ok")
    script.bash("grep -rn 'def grow' src", "src/box.py:12:    def grow(self):\n")
    analyzer = analyzer_after(script)
    shell_read = analyzer.predict("c", Partial("", "bash", "nl -ba s"), k=500)
    assert shell_read and all(c.kind in ("read", "view") and c.arguments["path"].startswith("s") for c in shell_read)
    native = analyzer.predict("c", Partial("", "read_file", "src/b"), k=500)
    assert native and all(c.name == "read_file" for c in native)
    runs = analyzer.predict("c", Partial("", "bash", "python r"), k=500)
    assert [c.key for c in runs] == [canonical_bash("python reproduce.py").key]


def test_candidates_are_complete_and_utility_orders_them() -> None:
    script = Script()
    script.bash("pytest -q", "1 failed", 1)
    script.step("write_file", {"path": "reproduce.py", "content": "print(1)\n"})
    candidates = analyzer_after(script).predict("a", k=20)
    assert candidates == sorted(candidates, key=lambda c: -c.utility)
    for c in candidates:
        assert c.key == canonical(c.name, c.arguments, "/repo").key
        assert 0.0 <= c.probability <= 1.0 and c.cost >= 0 and c.reason
        assert c.effect in ("pure", "sandboxed", "mutating", "unknown")
        if c.effect in ("mutating", "unknown"):
            assert c.utility < 0
    by_probability = analyzer_after(script).predict("a", k=20, order="probability")
    assert by_probability == sorted(by_probability, key=lambda c: -c.probability)


def test_streamed_reasoning_never_leaks_into_the_step_before_it() -> None:
    script = Script()
    script.bash("cat src/box.py", SOURCE)
    analyzer = analyzer_after(script)
    before = [(c.key, c.reason, c.probability) for c in analyzer.predict("a", k=50)]
    analyzer.predict("b", Partial("Let me look at `src/box.py` lines 3-5 and run `python x.py`"), k=50)
    assert [(c.key, c.reason, c.probability) for c in analyzer.predict("a", k=50)] == before
    later = analyzer.predict("b", Partial("Now grep for `helper`"), k=50)
    assert all("reasoning_range" not in c.reason and "reasoning_command" not in c.reason for c in later)


def test_moment_c_accepts_absolute_paths_for_workspace_files() -> None:
    script = Script(repo="/home/dev/calc")
    script.bash("grep -rn 'def add' calc", "calc/ops.py:1:def add(a, b):\n")
    analyzer = analyzer_after(script)
    assert find(analyzer.predict("c", Partial("", "read_file", "/home/dev/calc/ca"), k=50), read("calc/ops.py"))
    assert find(analyzer.predict("c", Partial("", "bash", "cat /home/dev/calc/calc/o"), k=50), read("calc/ops.py"))


def test_a_file_text_is_forgotten_once_the_file_is_edited() -> None:
    script = Script()
    script.bash("cat src/box.py", SOURCE)
    script.bash("sed -i 's/total/sum/' src/box.py")
    script.bash("grep -n helper src/box.py", "src/box.py:14:        sum += helper(sum)\n")
    candidates = analyzer_after(script).predict("a", k=500)
    assert not any("enclosing_function" in c.reason for c in candidates)


def test_the_first_argument_is_read_from_the_streamed_json() -> None:
    from harness.speculation.prediction.prefix import args_prefix_of

    assert args_prefix_of('{"command": "pytest t') == "pytest t"
    assert args_prefix_of('{"command": "echo \\"hi') == 'echo "hi'
    assert args_prefix_of('{"command": "a\\') == "a"
    assert args_prefix_of('{"path": "src/a.py", "start') == "src/a.py"
    assert args_prefix_of('{"comm') == ""


def test_another_agents_todo_list_and_subagent_calls_are_never_proposed_again() -> None:
    script = Script()
    script.step("TodoWrite", {"todos": [{"content": "Fix add", "status": "in_progress"}]}, "Todos updated.")
    script.step("Task", {"description": "Find uses", "prompt": "Search for add("}, "Only calc/ops.py uses it.")
    script.bash("cat calc/ops.py", "def add(a, b):\n    return a - b\n")
    keys = {c.key for c in analyzer_after(script).predict("a", k=500)}
    assert canonical_bash("cat calc/ops.py").key in keys  # an earlier workspace call is still repeated
    assert not any(key.startswith(("TodoWrite", "Task")) for key in keys)


def test_a_read_numbered_with_arrows_is_kept_as_the_files_text() -> None:
    from harness.speculation.prediction.state import plain_text

    assert (plain_text("     1\u2192def add(a, b):\n     2\u2192    return a - b\n")
            == "def add(a, b):\n    return a - b\n")
