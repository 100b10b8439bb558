"""The data-flow rules added for recall, each on a hand-made session: the candidate it must produce, or not."""

from __future__ import annotations

from harness.events import SessionStart
from harness.calls.canonical import canonical, canonical_bash
from harness.speculation.prediction.extract import ReasoningFacts, path_mentions
from harness.speculation.prediction.pattern_model import PatternModel
from harness.speculation.prediction.patterns import Partial
from harness.speculation.prediction.state import SessionState, listing_entries, split_test, tree_entries
from tests.test_patterns_dataflow import Script, analyzer_after, find, read

DJANGO_RUNNER = [{"runner": "./tests/runtests.py", "dotted": True, "share": 0.3},
                 {"runner": "pytest", "dotted": False, "share": 0.3}]
SYMPY_RUNNERS = [{"runner": "{python} -m pytest", "dotted": False, "share": 0.2},
                 {"runner": "bin/test", "dotted": False, "share": 0.1}]


def model_with(**fields: object) -> PatternModel:
    model = PatternModel()
    for name, value in fields.items():
        setattr(model, name, value)
    return model


def keys(script: Script, moment: str = "a", partial: Partial | None = None, **fields: object) -> dict[str, str]:
    analyzer = analyzer_after(script, model_with(**fields))
    return {c.key: c.reason for c in analyzer.predict(moment, partial, k=1000)}


# Repeats and edits.

def test_an_old_script_run_is_still_proposed_after_many_other_calls() -> None:
    script = Script()
    script.bash("python reproduce.py", "boom", 1)
    for n in range(40):
        script.bash(f"grep -n name{n} src/box.py", f"{n}:name{n}\n")
    assert "repeat" in keys(script)[canonical_bash("python reproduce.py").key]
    assert canonical("grep", {"pattern": "name0", "path": "src/box.py"}).key not in keys(script)


def test_running_a_script_that_rewrites_a_project_file_counts_as_an_edit() -> None:
    script = Script()
    script.bash("cat <<'EOF' > fix.py\npath = 'src/box.py'\ntext = open(path).read()\n"
                "with open(path, 'w') as f:\n    f.write(text.replace('a', 'b'))\nEOF")
    script.bash("cat <<'EOF' > check.py\nprint(open('src/box.py').read())\nEOF")
    before = analyzer_after(script).state.edits
    script.bash("python check.py", "ok")
    assert analyzer_after(script).state.edits == before  # reads only: not an edit
    script.bash("python fix.py", "")
    assert analyzer_after(script).state.edits == before + 1


def test_a_script_written_and_run_in_one_command_is_known_as_written() -> None:
    script = Script()
    script.bash("cat <<'EOF' > check.py\nprint(1)\nEOF\npython check.py", "1")
    script.bash("sed -i 's/a/b/' src/box.py")
    assert "run_written" in keys(script)[canonical_bash("python check.py").key]


# Clean-up.

def test_everything_made_anew_is_removed_together_folders_with_rm_rf() -> None:
    script = Script()
    script.bash("mkdir repro && cat <<'EOF' > repro/settings.py\nX = 1\nEOF", "")
    script.bash("cat <<'EOF' > apply_fix.py\nprint(1)\nEOF", "")
    found = keys(script)
    assert "cleanup_made" in found[canonical_bash("rm -rf repro apply_fix.py").key]
    assert "cleanup_last" in found[canonical_bash("rm apply_fix.py").key]


def test_a_project_file_that_was_seen_before_is_never_cleaned_up() -> None:
    script = Script()
    script.bash("ls src", "box.py\n")
    script.bash("cat <<'EOF' > src/box.py\nX = 1\nEOF", "")
    script.bash("cat <<'EOF' > check.py\nprint(1)\nEOF", "")
    assert not any("src/box.py" in key for key, reason in keys(script).items() if reason.startswith("cleanup"))


# Test runs.

def test_the_same_target_is_tried_with_another_runner_once_its_script_is_in_sight() -> None:
    script = Script()
    script.bash("python -m pytest pkg/tests/test_ops.py", "No module named pytest", 1)
    assert canonical_bash("bin/test pkg/tests/test_ops.py").key not in keys(script, test_runners=SYMPY_RUNNERS)
    script.bash("ls bin", "test\nisympy\n")
    found = keys(script, test_runners=SYMPY_RUNNERS)
    assert "test_switch" in found[canonical_bash("bin/test pkg/tests/test_ops.py").key]


def test_a_test_run_widens_to_its_folder_and_a_label_to_its_package() -> None:
    script = Script()
    script.bash("pytest pkg/tests/test_ops.py", "3 passed")
    assert "test_widen" in keys(script)[canonical_bash("pytest pkg/tests").key]
    script = Script()
    script.bash("./tests/runtests.py queries.test_q", "OK")
    assert "test_widen" in keys(script)[canonical_bash("./tests/runtests.py queries").key]


def test_a_selected_test_widens_to_its_file_and_never_to_a_file_with_a_slash() -> None:
    script = Script()
    script.bash("pytest pkg/tests/test_ops.py::test_add", "1 passed")
    found = keys(script)
    assert "test_widen" in found[canonical_bash("pytest pkg/tests/test_ops.py").key]
    assert canonical_bash("pytest pkg/tests/test_ops.py/").key not in found


def test_a_listed_test_folder_is_run_by_its_label_with_a_learned_dotted_runner() -> None:
    script = Script()
    script.bash("ls tests", "runtests.py\nqueries\ndelete\n")
    script.bash("ls tests/delete", "__init__.py\nmodels.py\ntests.py\n")
    found = keys(script, test_runners=DJANGO_RUNNER)
    assert "test_in_sight" in found[canonical_bash("./tests/runtests.py delete").key]
    assert "test_in_sight" in found[canonical_bash("pytest tests/delete/tests.py").key]


def test_a_runner_whose_folder_was_listed_without_its_script_is_not_proposed() -> None:
    without = Script()
    without.step("list_files", {}, "./\n  calc/\n    ops.py\n  tests/\n    test_ops.py\n")
    found = keys(without, test_runners=DJANGO_RUNNER)
    assert canonical_bash("./tests/runtests.py test_ops").key not in found  # tests/ was listed: no runtests.py
    assert "test_in_sight" in found[canonical_bash("pytest tests/test_ops.py").key]
    listed = Script()
    listed.step("list_files", {}, "./\n  tests/\n    runtests.py\n    test_ops.py\n")
    key = canonical_bash("./tests/runtests.py test_ops").key
    assert "test_in_sight" in keys(listed, test_runners=DJANGO_RUNNER)[key]


def test_tao_list_files_trees_name_their_entries_from_the_workspace_root() -> None:
    assert tree_entries("calc/\n  __init__.py\n  sub/\n    deep.py\n  ops.py\n") == [
        "calc/__init__.py", "calc/sub", "calc/sub/deep.py", "calc/ops.py"]
    cut = "./\n  ISSUE.md\n  tests/\n    test_ops.py\n[showing 3 of 9 entries; list a subfolder]"
    assert tree_entries(cut) == ["ISSUE.md", "tests", "tests/test_ops.py"]


def test_a_long_listing_offers_the_test_files_that_match_the_work() -> None:
    script = Script()
    script.bash("sed -i 's/a/b/' src/domains/std.py")
    script.step("edit_file", {"path": "src/domains/std.py", "old": "a", "new": "b"})
    names = [f"test_{name}.py" for name in ("api", "build", "config", "domain_py", "domain_std", "env", "util")]
    script.bash("ls tests", "\n".join(names) + "\n")
    found = keys(script)
    assert "test_in_sight" in found[canonical_bash("pytest tests/test_domain_std.py").key]
    assert canonical_bash("pytest tests/test_api.py").key not in found


def test_test_folders_that_match_the_work_are_listed() -> None:
    script = Script()
    script.bash("ls -R tests", "tests:\nadmin_inlines\nqueries\ndelete\n\ntests/delete:\nmodels.py\n")
    script.step("edit_file", {"path": "django/db/models/deletion.py", "old": "a", "new": "b"})
    assert "list_tests" in keys(script)[canonical("list_files", {"path": "tests/delete", "depth": 1}).key]


# Reasoning (moment b).

def test_a_bare_file_name_in_the_reasoning_is_read_where_it_was_seen() -> None:
    script = Script()
    script.bash("grep -rn 'class Engine' django", "django/template/engine.py:12:class Engine:\n")
    found = keys(script, "b", Partial("The class is defined in `engine.py`. Let me read engine.py."))
    assert "reasoning_path" in found[read("django/template/engine.py")]


def test_folders_named_in_the_reasoning_are_listed() -> None:
    script = Script()
    found = keys(script, "b", Partial("I'll start by listing the files in django/db/migrations to find it."))
    assert "reasoning_folder" in found[canonical("list_files", {"path": "django/db/migrations", "depth": 1}).key]


def test_quoted_and_dotted_names_are_searched_but_folder_names_are_not() -> None:
    script = Script()
    script.bash("cat django/core/checks/model_checks.py", "...")
    text = 'The error is `models.E015`. Let me search for "E015" in the whole `django` directory.'
    found = keys(script, "b", Partial(text))
    assert "reasoning_search" in found[canonical("grep", {"pattern": "E015", "path": "django"}).key]
    assert not any(key.startswith("grep") and '"pattern": "django"' in key for key in found)
    text = "Now check `xarray/core/dataset.py` to confirm `Dataset.integrate` uses `coord`."
    found = keys(Script(), "b", Partial(text))
    assert "reasoning_search" in found[canonical("grep", {"pattern": "def integrate",
                                                          "path": "xarray/core/dataset.py"}).key]


def test_the_reasoning_facts_skip_tool_names_and_collect_folders() -> None:
    facts = ReasoningFacts.of('Use `sed` to see `helper`; search "E015" under tests/ordering and `pkg/sub/`.')
    assert "sed" not in facts.symbols and {"helper", "E015"} <= set(facts.symbols)
    assert {"tests/ordering", "pkg/sub"} <= set(facts.folders)


# Reads that answer the next view or grep.

def test_a_read_of_the_file_in_hand_carries_the_time_of_the_views_it_answers() -> None:
    script = Script()
    script.bash("grep -n helper src/box.py", "14:        total += helper(total)\n")
    analyzer = analyzer_after(script, model_with(derive={"search|same": [0.5, 0.3]}))
    found = find(analyzer.predict("a", k=1000), read("src/box.py"))
    assert found is not None and "read_in_hand" in found.reason
    assert abs(found.derived - 0.15) < 1e-9
    assert found.utility > found.probability * found.latency_saved


# What the state makes of outputs.

def test_listings_diffs_and_tracebacks_name_paths_correctly() -> None:
    assert listing_entries("total 8\ndrwxr-xr-x 2 u g 4096 Jan 1 00:00 delete/\n-rw-r--r-- 1 u g 9 Jan 1 tests.py",
                           "tests") == ["tests/delete", "tests/tests.py"]
    assert path_mentions("diff --git a/pkg/x.py b/pkg/x.py\n--- a/pkg/x.py\n+++ b/pkg/x.py\n") == [("pkg/x.py", None)]
    assert path_mentions('File "<string>", line 1, in <module>\nFile "/r/pkg/x.py", line 3', "/r")[0] == ("pkg/x.py", 3)
    assert not any("<" in path for path, _ in path_mentions('File "<string>", line 1, in <module>'))


def test_the_session_learns_what_it_works_on() -> None:
    state = SessionState()
    state.observe(SessionStart(0.0, "s", "Fix the deletion of parents", "/repo", "test", []))
    from_task = state.relevance("tests/delete")
    assert from_task > 0 and state.relevance("tests/admin_inlines") == 0
    script = Script()
    script.step("edit_file", {"path": "django/db/models/deletion.py", "old": "a", "new": "b"})
    for event in script.events[1:]:
        state.observe(event)
    assert state.relevance("tests/delete") > from_task and state.relevance("tests/admin_inlines") == 0
    assert state.package() == "django"


def test_a_quoted_module_is_read_as_its_file() -> None:
    script = Script()
    script.bash("cat sympy/core/symbol.py", "from sympy.logic.boolalg import Boolean\n")
    found = keys(script, "b", Partial("`Boolean` is imported from `sympy.logic.boolalg`. Let's check it."))
    assert "reasoning_module" in found[read("sympy/logic/boolalg.py")]
    assert "reasoning_search" in found[canonical("grep", {"pattern": "class Boolean",
                                                          "path": "sympy/logic/boolalg.py"}).key]


def test_the_package_inside_a_source_folder_is_searched() -> None:
    script = Script()
    script.bash("cat lib/matplotlib/figure.py", "...")
    script.bash("cat lib/matplotlib/pyplot.py", "...")
    assert analyzer_after(script).state.package() == "lib/matplotlib"
    found = keys(script, "b", Partial("Let's look at `rc_context` implementation."))
    assert "reasoning_search" in found[canonical("grep", {"pattern": "def rc_context", "path": "lib/matplotlib"}).key]


def test_a_test_module_in_sight_is_also_run_as_its_whole_app() -> None:
    script = Script()
    script.bash("./tests/runtests.py queries", "OK")
    script.bash("ls tests/forms_tests", "__init__.py\ntest_widgets.py\n")
    found = keys(script)
    assert "test_in_sight" in found[canonical_bash("./tests/runtests.py forms_tests.test_widgets").key]
    assert "test_app" in found[canonical_bash("./tests/runtests.py forms_tests").key]


def test_a_test_file_seen_long_ago_is_run_once_the_work_matches_it() -> None:
    script = Script()
    script.bash("find . -name '*.py' | head", "./pkg/tests/test_parser.py\n./pkg/tests/test_lexer.py\n")
    for n in range(4):
        script.bash(f"cat pkg/notes{n}.txt", "...")
    assert canonical_bash("pytest pkg/tests/test_parser.py").key not in keys(script)
    script.step("edit_file", {"path": "pkg/parser.py", "old": "a", "new": "b"})
    assert "test_in_sight" in keys(script)[canonical_bash("pytest pkg/tests/test_parser.py").key]


# Tao's own test tool.

def test_tao_sessions_get_their_default_test_run_first_and_after_edits() -> None:
    default = canonical("run_tests", {}).key
    script = Script()
    assert keys(script).get(default) == "default_suite"  # nothing run yet
    script.step("run_tests", {}, "1 failed", 1)
    assert default not in keys(script) or "default_suite" not in keys(script)[default]  # nothing changed since
    script.step("edit_file", {"path": "src/box.py", "old": "a", "new": "b"}, "edited")
    assert "default_suite" in keys(script)[default]


def test_tao_sessions_run_a_test_file_in_sight_with_the_command_the_tool_shows() -> None:
    """run_tests' description shows `python -m pytest -q tests/test_x.py`: models using Tao type that."""
    shown = canonical_bash("python -m pytest -q tests/test_ops.py").key
    script = Script()
    script.step("read_file", {"path": "tests/test_ops.py"}, "def test_add():\n    assert add(1, 2) == 3\n")
    assert "test_in_sight" in keys(script)[shown]
    bash_only = Script()
    bash_only.builder.events[0].tools = ["bash", "finish"]
    bash_only.bash("cat tests/test_ops.py", "def test_add():\n    assert add(1, 2) == 3\n")
    assert canonical_bash("python -m pytest -q tests/test_ops.py").key not in keys(bash_only)


def test_agents_without_a_test_tool_are_not_offered_one() -> None:
    bash_only = Script()
    bash_only.builder.events[0].tools = ["bash", "finish"]
    assert canonical("run_tests", {}).key not in keys(bash_only)


def test_an_option_value_is_not_taken_for_the_test_target() -> None:
    assert split_test("python -m pytest -q -p no:cacheprovider tests/unit") == (
        "python -m pytest -q -p no:cacheprovider", "tests/unit")
    assert split_test("pytest -k 'slow' tests") == ("pytest -k 'slow'", "tests")
    assert split_test("python tests/runtests.py queries.test_q") == ("python tests/runtests.py", "queries.test_q")


def test_a_compound_command_gives_a_runner_only_when_its_first_part_runs_tests() -> None:
    assert split_test("cd tests && python runtests.py queries") == ("cd tests && python runtests.py queries", None)
    assert split_test("git stash; pytest tests/a.py") == ("git stash; pytest tests/a.py", None)
    assert split_test("pytest tests/a.py && echo ok") == ("pytest", "tests/a.py")
    assert split_test("python -m pytest tests/a.py 2>&1 | tail -20") == ("python -m pytest", "tests/a.py")


def test_a_learned_habit_is_proposed_only_to_a_session_that_offers_its_tool() -> None:
    """Claude Code and Codex CLI have no finish tool: a learned `finish` habit must not take a place there."""
    habits = [{"name": "finish", "arguments": {}, "share": 0.9},
              {"name": "bash", "arguments": {"command": "git diff"}, "share": 0.5},
              {"name": "read_file", "arguments": {"path": "README.md"}, "share": 0.4}]  # `cat README.md` in a shell
    with_finish = Script()
    with_finish.builder.events[0].tools = ["bash", "finish"]
    with_finish.bash("ls", "a.py\n")
    assert {"finish", canonical_bash("git diff").key} <= set(keys(with_finish, habits=habits))
    without = Script()
    without.builder.events[0].tools = ["bash"]
    without.bash("ls", "a.py\n")
    offered = keys(without, habits=habits)
    assert "finish" not in offered and canonical_bash("git diff").key in offered
    assert canonical_bash("cat README.md").key in offered
