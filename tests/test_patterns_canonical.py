"""The canonical action form: equal effects compare equal, different effects never do."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.calls.action import changes_workspace
from harness.calls.canonical import canonical, canonical_bash, normalize_command
from tools.base import Effect


def key(command: str, root: str = "/testbed") -> str:
    return canonical_bash(command, root).key


def call(name: str, **arguments: object) -> str:
    return canonical(name, dict(arguments), "/testbed").key


@pytest.mark.parametrize("command", [
    "cat src/app.py", "cat  ./src/app.py", 'cat "src/app.py"', "nl -ba src/app.py", "cat -n src/app.py",
    "cat /testbed/src/app.py", "cd /testbed && cat src/app.py",
])
def test_whole_file_reads_are_read_file(command: str) -> None:
    assert key(command) == call("read_file", path="src/app.py")
    assert canonical_bash(command, "/testbed").effect == Effect.PURE


@pytest.mark.parametrize("command", [
    "nl -ba src/app.py | sed -n '10,20p'", "sed -n '10,20p' src/app.py", "sed -n 10,20p src/app.py",
    "cat -n src/app.py | sed -n '10,20p'", 'sed -n -e "10,20p" src/app.py',
])
def test_range_views_are_read_file_with_lines(command: str) -> None:
    assert key(command) == call("read_file", path="src/app.py", start_line=10, end_line=20)


def test_head_and_single_lines() -> None:
    assert key("head -n 30 a.py") == key("head -30 a.py") == call("read_file", path="a.py", start_line=1, end_line=30)
    assert key("sed -n '7p' a.py") == call("read_file", path="a.py", start_line=7, end_line=7)
    assert call("read_file", path="a.py", start_line=1) == call("read_file", path="a.py")
    assert key("tail -n 5 a.py") != call("read_file", path="a.py")


@pytest.mark.parametrize("command,pattern,path", [
    ('grep -rn "def foo" django/', "def foo", "django"),
    ("grep -n foo a.py", "foo", "a.py"),
    ("grep -r 'x\\|y' .", "x|y", None),
    ("grep -rnE 'a+b' src", "a+b", "src"),
    ("grep -rn 'a+b' src", "a\\+b", "src"),
    ("grep -rF 'a.b(' src", "a\\.b\\(", "src"),
    ("grep -rni Foo src", "(?i)Foo", "src"),
])
def test_greps_that_only_change_the_format_are_grep(command: str, pattern: str, path: str | None) -> None:
    expected = {"pattern": pattern, **({"path": path} if path else {})}
    assert key(command) == canonical("grep", expected).key


def test_grep_include_becomes_glob() -> None:
    assert key("grep -rn --include=*.py TODO src") == call("grep", pattern="TODO", path="src", glob="*.py")


@pytest.mark.parametrize("command", [
    "grep -l foo src -r", "grep -A 5 foo a.py", "grep -c foo a.py", "grep foo a.py b.py", "grep -rn $X src",
])
def test_greps_with_other_effects_stay_bash(command: str) -> None:
    action = canonical_bash(command)
    assert action.tool == "bash" and action.kind == "search" and action.effect == Effect.SANDBOXED


def test_test_runs_are_run_tests_and_scripts_stay_bash() -> None:
    assert key("pytest tests/test_x.py -q") == call("run_tests", command="pytest tests/test_x.py -q")
    assert key("cd /testbed && python -m pytest  tests") == call("run_tests", command="python -m pytest tests")
    assert canonical_bash("./tests/runtests.py queries").kind == "test"
    script = canonical_bash("python reproduce.py")
    assert (script.tool, script.kind, script.effect) == ("bash", "script", Effect.SANDBOXED)
    assert canonical_bash("python3 -c 'print(1)'").kind == "script"


def test_heredoc_writes_are_write_file_and_write_then_run_is_one_action() -> None:
    write = canonical_bash("cat <<'EOF' > r.py\nprint(1)\nEOF")
    assert write.key == call("write_file", path="r.py", content="print(1)\n") and write.effect == Effect.MUTATING
    assert key("cat > r.py <<'EOF'\nprint(1)\nEOF") == write.key
    both = canonical_bash("cat <<'EOF' > r.py\nprint(1)\nEOF\npython r.py")
    assert (both.tool, both.kind, both.effect) == ("bash", "write_run", Effect.MUTATING)
    expanding = canonical_bash('cat <<EOF > r.py\nprint("$HOME")\nEOF')
    assert expanding.tool == "bash"  # the shell would expand $HOME: not a literal write


def test_whitespace_and_quoting_do_not_matter_but_expansion_does() -> None:
    assert key("python  reproduce.py   --fast") == key("python 'reproduce.py' \"--fast\"")
    assert key('echo "$HOME"') != key("echo '$HOME'")
    assert key("rm a.py b.py") != key("rm b.py a.py")


def test_listings_and_effects() -> None:
    assert key("ls -la src") == call("list_files", path="src", depth=1) == key("ls src/")
    assert canonical_bash("ls -R src").tool == "bash"
    assert canonical_bash("git diff").effect == Effect.PURE  # git reads: see test_calls_ecosystems.py
    assert canonical_bash("git checkout a.py").effect == Effect.MUTATING
    assert canonical_bash("sed -i 's/a/b/' x.py").kind == "edit"
    assert canonical_bash("rm x.py").kind == "cleanup"
    assert canonical_bash("find . -name '*.py' -delete").effect == Effect.MUTATING
    assert canonical_bash("sort -o out.txt in.txt").effect == Effect.MUTATING
    assert changes_workspace(canonical_bash("python fix.py")) and not changes_workspace(canonical_bash("cat a"))


def test_structured_calls_normalise_paths_and_foreign_tools_keep_their_name() -> None:
    assert call("read_file", path="/testbed/./src//a.py") == call("read_file", path="src/a.py")
    assert canonical("finish", {"summary": "x"}).key == canonical("finish", {"summary": "y"}).key == "finish"
    glob = canonical("Glob", {"pattern": "**/*.py"})
    assert (glob.tool, glob.kind, glob.effect) == ("Glob", "search", "unknown")


def test_a_foreign_tool_gets_the_kind_its_name_says_and_is_never_speculated() -> None:
    kinds = {name: canonical(name, {"command": f"{name} x"}) for name in
             ("edit", "insert", "goto", "scroll_down", "find_file", "filemap", "submit", "MultiEdit", "TodoWrite")}
    assert {name: action.kind for name, action in kinds.items()} == {
        "edit": "edit", "insert": "edit", "goto": "view", "scroll_down": "view", "find_file": "search",
        "filemap": "list", "submit": "finish", "MultiEdit": "edit", "TodoWrite": "other"}
    assert all(action.effect == "unknown" and action.tool == name for name, action in kinds.items())


def test_unparseable_commands_are_whitespace_normalised() -> None:
    action = canonical_bash("echo $(pwd)   &&  ls")
    assert action.tool == "bash" and action.effect == Effect.MUTATING
    assert action.key == canonical_bash("echo $(pwd) && ls").key


_WORDS = st.text(alphabet="abcxyz_./-", min_size=1, max_size=8)


@given(st.lists(_WORDS, min_size=1, max_size=5), st.lists(st.sampled_from([" ", "  ", "\t"]), min_size=5, max_size=5))
def test_spacing_never_changes_the_key(words: list[str], gaps: list[str]) -> None:
    spaced = "".join(word + gap for word, gap in zip(words, gaps))
    assert key(spaced) == key(" ".join(words))
    assert normalize_command(normalize_command(spaced)) == normalize_command(spaced)


@given(_WORDS)
def test_quoting_a_literal_word_never_changes_the_key(word: str) -> None:
    assert key(f"cat {word}") == key(f"cat '{word}'") == key(f'cat "{word}"')


@pytest.mark.parametrize(("command", "kind"), [('grep "unclosed src/app.py', "search"), ('pytest "unclosed', "test")])
def test_a_command_the_reader_cannot_parse_still_has_its_first_word_s_kind(command: str, kind: str) -> None:
    assert canonical_bash(command, "/testbed").kind == kind
