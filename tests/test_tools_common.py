"""run_tool's argument checks, path confinement for every path-taking tool, and the tool specs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sandbox import Workspace
from tools import Bash, Effect, Tool, default_tools, run_tool, tool_specs
from tools.base import observe, truncate


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.py").write_text("x = 1\n")
    return Workspace(root)


@pytest.fixture
def tools():
    made = default_tools(bash_timeout=5, test_timeout=5)
    yield {tool.name: tool for tool in made}
    for tool in made:
        if isinstance(tool, Bash):
            tool.close()


def test_every_tool_has_a_complete_schema(tools):
    for tool in tools.values():
        assert isinstance(tool, Tool)
        assert tool.description and len(tool.description) < 400
        assert isinstance(tool.effect, Effect)
        params = tool.parameters
        assert params["type"] == "object"
        assert params["additionalProperties"] is False
        assert set(params["required"]) <= set(params["properties"])
        assert "timeout" not in params["properties"]


def test_effects_are_as_designed(tools):
    effects = {name: tool.effect for name, tool in tools.items()}
    assert effects == {
        "read_file": Effect.PURE, "list_files": Effect.PURE, "grep": Effect.PURE, "outline": Effect.PURE,
        "edit_file": Effect.MUTATING, "write_file": Effect.MUTATING, "run_tests": Effect.SANDBOXED,
        "bash": Effect.MUTATING, "finish": Effect.PURE,
    }


def test_tool_specs_are_openai_function_entries(tools):
    specs = tool_specs(list(tools.values()))
    assert [spec["function"]["name"] for spec in specs] == list(tools)
    for spec in specs:
        assert spec["type"] == "function"
        assert set(spec["function"]) == {"name", "description", "parameters"}
    json.dumps(specs)  # serialisable as is


def test_default_tools_are_fresh_per_session():
    first, second = default_tools(), default_tools()
    assert all(a is not b for a, b in zip(first, second))


def test_default_tools_pass_settings():
    made = {tool.name: tool for tool in default_tools(test_command="make check", bash_timeout=7, test_timeout=9)}
    assert made["bash"].timeout == 7
    assert made["run_tests"].timeout == 9
    assert made["run_tests"].default_command == "make check"


async def test_missing_required_argument(tools, workspace):
    obs = await run_tool(tools["read_file"], {}, workspace)
    assert obs.is_error
    assert "missing required argument 'path'" in obs.text
    assert "path (string, required)" in obs.text  # what was expected
    assert "Call read_file again" in obs.text  # what to do


async def test_wrong_type(tools, workspace):
    obs = await run_tool(tools["read_file"], {"path": "a.py", "start_line": "3"}, workspace)
    assert obs.is_error
    assert "'start_line' must be an integer, got a string" in obs.text


async def test_bool_is_not_an_integer(tools, workspace):
    obs = await run_tool(tools["read_file"], {"path": "a.py", "start_line": True}, workspace)
    assert obs.is_error and "must be an integer, got a boolean" in obs.text


async def test_minimum(tools, workspace):
    obs = await run_tool(tools["read_file"], {"path": "a.py", "start_line": 0}, workspace)
    assert obs.is_error and "'start_line' must be at least 1" in obs.text


async def test_unknown_argument(tools, workspace):
    obs = await run_tool(tools["read_file"], {"path": "a.py", "lines": 3}, workspace)
    assert obs.is_error
    assert "unknown argument 'lines'" in obs.text


async def test_bash_timeout_is_not_an_argument(tools, workspace):
    obs = await run_tool(tools["bash"], {"command": "true", "timeout": 1}, workspace)
    assert obs.is_error and "unknown argument 'timeout'" in obs.text


async def test_several_problems_are_named_together(tools, workspace):
    obs = await run_tool(tools["edit_file"], {"path": 3, "old": "x", "extra": 1}, workspace)
    assert obs.is_error
    assert "unknown argument 'extra'" in obs.text
    assert "missing required argument 'new'" in obs.text
    assert "'path' must be a string, got an integer" in obs.text


async def test_arguments_as_json_text(tools, workspace):
    obs = await run_tool(tools["read_file"], '{"path": "a.py"}', workspace)
    assert not obs.is_error and "x = 1" in obs.text
    bad = await run_tool(tools["read_file"], '{"path": ', workspace)
    assert bad.is_error and "not valid JSON" in bad.text
    listed = await run_tool(tools["read_file"], ["a.py"], workspace)
    assert listed.is_error and "must be a JSON object, not an array" in listed.text


async def test_null_optional_argument_counts_as_absent(tools, workspace):
    obs = await run_tool(tools["read_file"], {"path": "a.py", "start_line": None}, workspace)
    assert not obs.is_error and "x = 1" in obs.text


PATH_CALLS = [
    ("read_file", {}),
    ("list_files", {}),
    ("grep", {"pattern": "root"}),
    ("outline", {}),
    ("edit_file", {"old": "root", "new": "toor"}),
    ("write_file", {"content": "pwned\n"}),
]


@pytest.mark.parametrize(("name", "extra"), PATH_CALLS, ids=[name for name, _ in PATH_CALLS])
@pytest.mark.parametrize("escape", ["../outside.txt", "ABSOLUTE", "link/outside.txt", "filelink"])
async def test_paths_outside_the_workspace_are_refused(tools, workspace, name, extra, escape):
    outside_dir = workspace.root.parent / "outside"
    outside_dir.mkdir(exist_ok=True)
    secret = outside_dir / "outside.txt"
    secret.write_text("root secret\n")
    (workspace.root.parent / "outside.txt").write_text("root secret\n")
    (workspace.root / "link").symlink_to(outside_dir)
    (workspace.root / "filelink").symlink_to(secret)
    path = str(secret) if escape == "ABSOLUTE" else escape
    obs = await run_tool(tools[name], {"path": path, **extra}, workspace)
    assert obs.is_error
    assert "outside the workspace" in obs.text
    assert "secret" not in obs.text.replace(str(secret), "")  # nothing of the file's content leaks
    assert secret.read_text() == "root secret\n"


async def test_etc_passwd_is_refused(tools, workspace):
    obs = await run_tool(tools["read_file"], {"path": "/etc/passwd"}, workspace)
    assert obs.is_error and "outside the workspace" in obs.text and "root:" not in obs.text


async def test_os_errors_become_observations(tools, workspace):
    obs = await run_tool(tools["write_file"], {"path": "n" * 300 + ".txt", "content": "y"}, workspace)
    assert obs.is_error
    assert "File name too long" in obs.text


def test_truncate_names_dropped_bytes_too():
    text, cut = truncate("x" * 100, 20, dropped_bytes=5000)
    assert cut == 80
    assert "80 characters and 5000 more bytes cut" in text
    obs = observe("y" * 40_000, extra_cut=7)
    assert obs.truncated_chars == 40_000 - 30_000 + 7
    assert "and 7 more bytes" in obs.text
    plain, _ = truncate("z" * 100, 20)
    assert "80 characters cut from the middle" in plain
