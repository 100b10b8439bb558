"""The tools the model calls, and the one place their errors become observations.

    default_tools(...)            fresh tool instances for one session
    run_tool(tool, args, ws)      validate args against the schema, run, turn errors into observations
    tool_specs(tools)             OpenAI-style function entries for the prompt or a native-tools engine

Importing this package starts nothing (the bash tool's shell starts on its first call).
"""

from __future__ import annotations

from typing import Any

from sandbox import Workspace, WorkspaceEscape
from tools.base import Effect, Observation, Tool, ToolError, observe
from tools.editing import EditFile, WriteFile
from tools.finish import Finish
from tools.grep import Grep
from tools.outline import Outline
from tools.reading import ListFiles, ReadFile
from tools.run_tests import DEFAULT_TEST_TIMEOUT, RunTests
from tools.schema import coerce_args, validate_args
from tools.shell import DEFAULT_BASH_TIMEOUT, Bash

__all__ = [
    "Bash", "EditFile", "Effect", "Finish", "Grep", "ListFiles", "Observation", "Outline", "ReadFile",
    "RunTests", "Tool", "ToolError", "WriteFile", "default_tools", "run_tool", "tool_specs",
]


def default_tools(*, test_command: str | None = None, bash_timeout: float = DEFAULT_BASH_TIMEOUT,
                  test_timeout: float = DEFAULT_TEST_TIMEOUT) -> list[Tool]:
    """Fresh instances for one session (the bash tool holds that session's shell; close it at the end)."""
    return [
        ReadFile(),
        ListFiles(),
        Grep(),
        Outline(),
        EditFile(),
        WriteFile(),
        RunTests(timeout=test_timeout, default_command=test_command),
        Bash(timeout=bash_timeout),
        Finish(),
    ]


async def run_tool(tool: Tool, args: Any, workspace: Workspace) -> Observation:
    """Run one call. Bad arguments, paths outside the workspace and file-system refusals come back as
    error observations (`is_error=True`) saying what was wrong and what to do; nothing is raised for them.

    `args` may be a dict, a JSON object string or None. The caller bumps the workspace version for
    authoritative mutating calls.
    """
    try:
        parsed = coerce_args(tool.name, args)
        validate_args(tool.name, tool.parameters, parsed)
        return await tool.run(parsed, workspace)
    except ToolError as exc:
        return observe(f"Error: {exc}", is_error=True)
    except WorkspaceEscape as exc:
        return observe(f"Error: {exc}", is_error=True)
    except OSError as exc:  # permission denied, read-only file system, disk full...
        return observe(f"Error: {tool.name} failed: {exc.strerror or exc}{_where(exc, workspace)}", is_error=True)


def _where(exc: OSError, workspace: Workspace) -> str:
    if not exc.filename:
        return ""
    try:
        return f" ({workspace.relative(workspace.resolve(exc.filename))})"
    except (WorkspaceEscape, ValueError):
        return f" ({exc.filename})"


def tool_specs(tools: list[Tool]) -> list[dict[str, Any]]:
    """`{"type": "function", "function": {name, description, parameters}}` for each tool, in order."""
    return [
        {"type": "function",
         "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters}}
        for tool in tools
    ]
