"""run_tool never raises for any model input: odd paths, deep nesting, huge numbers, broken tools, hangs.

Findings of issue 21 covered here: model-controlled input crashed the session (1), a tool call could
run unbounded (5), and error texts used Tao's spelling of a path instead of the caller's (8).
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandbox import Workspace, WorkspaceView
from tools import Bash, Effect, Observation, default_tools, run_tool
from tools.base import call_deadline


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    root = tmp_path / "ws"
    (root / "sub").mkdir(parents=True)
    (root / "a.py").write_text("x = 1\n\ndef f():\n    return x\n")
    (root / "sub" / "b.txt").write_text("needle\n")
    (root / "link").symlink_to("sub")
    return Workspace(root)


@pytest.fixture
def tools():
    made = default_tools(bash_timeout=5, test_timeout=5)
    yield {tool.name: tool for tool in made}
    for tool in made:
        if isinstance(tool, Bash):
            tool.close()


def nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


# (tool, arguments) that each raised out of run_tool before the fix.
CRASHERS = [
    ("read_file", {"path": "a\x00b"}),
    ("write_file", {"path": "new\x00.txt", "content": "x"}),
    ("edit_file", {"path": "a.py\x00", "old": "x", "new": "y"}),
    ("grep", {"pattern": "x", "path": "sub\x00"}),
    ("list_files", {"path": "\x00"}),
    ("outline", {"path": "a\x00.py"}),
    ("read_file", {"path": nested(5000)}),
    ("read_file", {"path": "a.py", "extra": {"k": nested(5000)}}),
    ("read_file", "[" * 100_000),
    ("read_file", '{"path": ' + "1" * 5000 + "}"),
    ("read_file", {"path": "a.py", "start_line": 10**5000}),
    ("read_file", {"path": "a.py", "start_line": -10**5000}),
    ("read_file", {"path": 10**5000}),
    ("list_files", {"depth": -10**5000}),
    ("read_file", {"path": "\ud800"}),
    ("outline", {"path": "\udfff.py"}),
    ("write_file", {"path": "s\ud800.txt", "content": "x"}),
    ("grep", {"pattern": "\ud800"}),
    ("grep", {"pattern": "x", "glob": "\ud800"}),
    ("run_tests", {"command": "echo \ud800"}),
    ("run_tests", {"command": "echo a\x00b"}),
    ("read_file", {1: "x", None: 2, "path": "a.py"}),  # keys no JSON object has, from a lenient parser
]


@pytest.mark.parametrize(("name", "args"), CRASHERS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CRASHERS)])
async def test_model_input_becomes_an_error_observation(tools, workspace, name, args):
    obs = await run_tool(tools[name], args, workspace)
    assert isinstance(obs, Observation)
    assert obs.is_error
    assert obs.text.startswith("Error: ")
    assert "Traceback" not in obs.text and "bug in Tao" not in obs.text
    assert len(obs.text) < 2000


async def test_nul_byte_message_says_what_and_what_to_do(tools, workspace):
    obs = await run_tool(tools["read_file"], {"path": "a\x00b"}, workspace)
    assert "NUL" in obs.text and "'a\\x00b'" in obs.text
    assert "without" in obs.text  # what to do


async def test_deep_nesting_message_says_what_and_what_to_do(tools, workspace):
    obs = await run_tool(tools["read_file"], "[" * 100_000, workspace)
    assert "nested too deeply" in obs.text
    value = await run_tool(tools["read_file"], {"path": nested(5000)}, workspace)
    assert "'path' must be a string, got an array" in value.text


async def test_huge_numbers_are_named_not_printed(tools, workspace):
    obs = await run_tool(tools["read_file"], {"path": "a.py", "start_line": 10**5000}, workspace)
    assert "5001-digit" in obs.text and "past the end of a.py" in obs.text


class Broken:
    """A stand-in tool whose run raises an unexpected exception: the test is about run_tool, not a tool."""

    name = "broken"
    description = "always fails"
    parameters: dict[str, Any] = {"type": "object", "properties": {}, "required": [], "additionalProperties": False}
    effect = Effect.PURE

    async def run(self, args: dict[str, Any], workspace: WorkspaceView) -> Observation:
        return {}["missing"]  # type: ignore[no-any-return]


async def test_a_bug_inside_a_tool_is_named_without_a_traceback(workspace):
    obs = await run_tool(Broken(), {}, workspace)
    assert obs.is_error
    assert "bug in Tao" in obs.text and "broken" in obs.text and "KeyError" in obs.text
    assert "Traceback" not in obs.text and "'missing'" not in obs.text


class Hanging:
    """A stand-in tool that never finishes: the test is about run_tool's deadline, not a tool."""

    name = "hanging"
    description = "never returns"
    parameters: dict[str, Any] = {"type": "object", "properties": {}, "required": [], "additionalProperties": False}
    effect = Effect.PURE
    timeout = 0.2

    def __init__(self) -> None:
        self.cancelled = False

    async def run(self, args: dict[str, Any], workspace: WorkspaceView) -> Observation:
        try:
            await asyncio.Event().wait()
        finally:
            self.cancelled = True
        raise AssertionError("unreachable")


async def test_a_tool_that_never_finishes_times_out(workspace):
    tool = Hanging()
    obs = await run_tool(tool, {}, workspace)
    assert obs.is_error
    assert "hanging did not finish within 0.2 s" in obs.text
    assert tool.cancelled


async def test_cancelling_run_tool_still_cancels(workspace):
    task = asyncio.ensure_future(run_tool(Hanging(), {}, workspace))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_every_tool_has_a_finite_deadline(tools):
    for tool in tools.values():
        deadline = call_deadline(tool)
        assert 0 < deadline < 3600, tool.name
    assert call_deadline(tools["bash"]) > tools["bash"].timeout  # its own timeout acts first
    assert call_deadline(tools["run_tests"]) > tools["run_tests"].timeout


def test_pure_tool_timeout_is_configurable():
    made = {tool.name: tool for tool in default_tools(tool_timeout=7)}
    for name in ("read_file", "list_files", "grep", "outline", "edit_file", "write_file", "finish"):
        assert call_deadline(made[name]) - getattr(made[name], "timeout_grace", 0.0) == 7, name


# --- finding 8: error texts in the caller's own spelling ----------------------------------------------

SPELLINGS = [
    ("read_file", {}, "sub"),  # a directory
    ("outline", {}, "sub/b.txt"),  # not a .py file
    ("edit_file", {"old": "zzz", "new": "y"}, "a.py"),  # old not found
    ("write_file", {"content": "x"}, "sub"),  # a folder
    ("list_files", {}, "a.py"),  # a file
    ("grep", {"pattern": "x"}, "sub/nope"),  # missing
]


@pytest.mark.parametrize(("name", "extra", "path"), SPELLINGS, ids=[s[0] for s in SPELLINGS])
async def test_error_texts_use_the_callers_spelling(tools, workspace, name, extra, path):
    texts = set()
    for spelling in (path, f"./{path}", f"sub/../{path}", str(workspace.root / path)):
        obs = await run_tool(tools[name], {"path": spelling, **extra}, workspace)
        assert obs.is_error, (spelling, obs.text)
        assert spelling in obs.text, (spelling, obs.text)
        texts.add(obs.text)
    assert len(texts) == 4


async def test_read_range_error_uses_the_callers_spelling(tools, workspace):
    obs = await run_tool(tools["read_file"], {"path": "./a.py", "start_line": 99}, workspace)
    assert "past the end of ./a.py, which has 4 lines" in obs.text


# --- property: any JSON value as arguments ------------------------------------------------------------

_odd_chars = st.sampled_from(["\x00", "\x01", "\x1b", "\n", "\r", "\t", "\x7f", "\u2028", "\ud800", "\udcff",
                              "\ufeff", "..", "/", "*", "(", "\\", "é", "~"])
_paths = st.sampled_from(["a.py", "sub", "sub/b.txt", "link", "link/b.txt", "../x", "/etc/passwd", "", ".",
                          "sub/", "./a.py", "nope/deeper.py", "a.py/x", "sub/../a.py", "link/../a.py"])
_strings = st.one_of(_paths, st.text(max_size=20),
                     st.lists(st.one_of(_odd_chars, st.text(max_size=3)), max_size=8).map("".join),
                     st.tuples(_paths, _odd_chars, _paths).map("".join))
_huge = st.sampled_from([5000, 400, 63]).map(lambda k: -(10**k) if k == 400 else 10**k)  # built lazily: no repr
_scalars = st.one_of(st.none(), st.booleans(), st.integers(), _huge,
                     st.floats(allow_nan=True, allow_infinity=True), _strings)
_json = st.recursive(_scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(_strings, inner, max_size=4)),
                     max_leaves=12)


def _arguments(tool_name: str, keys: list[str]) -> st.SearchStrategy[Any]:
    """Argument objects for one tool: its own keys with any values, unknown keys, non-objects, JSON text."""
    keyed = st.dictionaries(st.one_of(st.sampled_from(keys), _strings), _json, max_size=5)
    if tool_name in ("bash", "run_tests"):
        # Never run arbitrary text as a command: the command's bytes are printed, not executed.
        safe = st.builds(lambda text: {"command": "printf '%s' " + json.dumps(text)}, _strings)
        keyed = st.one_of(keyed.filter(lambda a: not isinstance(a.get("command"), str)), safe)
    as_text = _json.map(_dumps)
    odd_text = st.sampled_from([50_000, 1, 0, 4]).map(lambda n: "[" * n if n > 1 else ["{", "", "null"][n % 3])
    return st.one_of(keyed, _json, as_text, odd_text)


def _dumps(value: Any) -> str:
    """JSON text of a generated value; one with a huge integer becomes a huge integer literal."""
    try:
        return json.dumps(value)
    except ValueError:
        return '{"path": ' + "1" * 5000 + "}"


TOOL_NAMES = [tool.name for tool in default_tools()]


@pytest.mark.parametrize("name", TOOL_NAMES)
def test_run_tool_never_raises(tmp_path, name):
    root = tmp_path / "ws"
    (root / "sub").mkdir(parents=True)
    (root / "a.py").write_text("x = 1\n")
    (root / "sub" / "b.txt").write_text("needle\n")
    (root / "link").symlink_to("sub")
    canary = tmp_path / "x"
    canary.write_text("outside\n")
    workspace = Workspace(root)
    made = {tool.name: tool for tool in default_tools(bash_timeout=5, test_timeout=5)}
    tool = made[name]
    keys = list(tool.parameters["properties"]) or ["summary"]
    examples = 40 if name in ("bash", "run_tests") else 150

    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck))
    @given(args=_arguments(name, keys))
    def check(args: Any) -> None:
        obs = asyncio.run(run_tool(tool, args, workspace))
        assert isinstance(obs, Observation)
        assert isinstance(obs.text, str)
        assert "Traceback" not in obs.text
        assert "bug in Tao" not in obs.text, obs.text

    try:
        check()
    finally:
        for made_tool in made.values():
            if isinstance(made_tool, Bash):
                made_tool.close()
    assert canary.read_text() == "outside\n"
    assert not (tmp_path / "etc").exists() and os.path.exists("/etc/passwd")
