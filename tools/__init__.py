"""The tools the model calls, and the one place their errors become observations.

    default_tools(...)            fresh tool instances for one session
    run_tool(tool, args, ws)      validate args against the schema, run, turn errors into observations
    tool_specs(tools)             OpenAI-style function entries for the prompt or a native-tools engine
    TOOL_EFFECTS                  each tool's effect class by name, for calls that name a tool

Importing this package starts nothing (the bash tool's shell starts on its first call).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from sandbox import WorkspaceEscape, WorkspaceView
from sandbox.beneath import BadPath
from tools.base import Effect, Observation, Tool, ToolError, call_deadline, observe
from tools.editing import EditFile, WriteFile
from tools.finish import Finish
from tools.grep import Grep
from tools.outline import Outline
from tools.reading import ListFiles, ReadFile
from tools.run_tests import DEFAULT_TEST_TIMEOUT, RunTests
from tools.schema import coerce_args, validate_args
from tools.bash import DEFAULT_BASH_TIMEOUT, Bash
from tools.textfile import spell

_log = logging.getLogger(__name__)
_CANCEL_PATIENCE = 5.0  # seconds a timed-out call gets to wind down after it is cancelled

__all__ = [
    "Bash", "EditFile", "Effect", "Finish", "Grep", "ListFiles", "Observation", "Outline", "ReadFile",
    "RunTests", "TOOL_EFFECTS", "Tool", "ToolError", "WriteFile", "call_deadline", "default_tools", "run_tool",
    "tool_specs",
]

TOOL_TYPES: tuple[type[Tool], ...] = (ReadFile, ListFiles, Grep, Outline, EditFile, WriteFile, RunTests, Bash, Finish)
# Each tool's effect class, from the tool itself: the one place a call's effect is looked up by name.
TOOL_EFFECTS: dict[str, Effect] = {tool.name: tool.effect for tool in TOOL_TYPES}


def default_tools(*, test_command: str | None = None, bash_timeout: float = DEFAULT_BASH_TIMEOUT,
                  test_timeout: float = DEFAULT_TEST_TIMEOUT, tool_timeout: float | None = None) -> list[Tool]:
    """Fresh instances for one session (the bash tool holds that session's shell; close it at the end).

    `tool_timeout` bounds each call of the tools without a timeout of their own (all but bash and
    run_tests); None: DEFAULT_TOOL_TIMEOUT (GREP_TIMEOUT for grep), read when the call runs."""
    return [
        ReadFile(timeout=tool_timeout),
        ListFiles(timeout=tool_timeout),
        Grep(timeout=tool_timeout),
        Outline(timeout=tool_timeout),
        EditFile(timeout=tool_timeout),
        WriteFile(timeout=tool_timeout),
        RunTests(timeout=test_timeout, default_command=test_command),
        Bash(timeout=bash_timeout),
        Finish(timeout=tool_timeout),
    ]


async def run_tool(tool: Tool, args: Any, workspace: WorkspaceView) -> Observation:
    """Run one call; never raises (but CancelledError). Bad arguments, paths outside the workspace,
    file-system refusals and a call past its deadline (`call_deadline`) come back as error
    observations (`is_error=True`) saying what was wrong and what to do; an unexpected exception inside
    a tool comes back as one naming the tool and the exception type as a bug in Tao.

    `args` may be a dict, a JSON object string or None. The caller bumps the workspace version for
    authoritative mutating calls.
    """
    name = str(getattr(tool, "name", "tool"))
    parsed: dict[str, Any] = {}
    try:
        parsed = coerce_args(name, args)
        validate_args(name, tool.parameters, parsed)
        return await _run_bounded(tool, name, parsed, workspace)
    except (ToolError, WorkspaceEscape, BadPath) as exc:
        return observe(f"Error: {exc}", is_error=True)
    except OSError as exc:  # permission denied, read-only file system, disk full...
        return observe(f"Error: {name} failed: {exc.strerror or exc}{_where(parsed)}", is_error=True)
    except Exception as exc:  # a bug must not end the session; the model is told so
        _log.warning("tool %s raised %s: %s", name, type(exc).__name__, exc, exc_info=_log.isEnabledFor(logging.DEBUG))
        return observe(f"Error: {name} stopped on an unexpected {type(exc).__name__}. This is a bug in Tao, not "
                       "a problem with your call; try another way to get what you need (for example bash).",
                       is_error=True, bug=type(exc).__name__)


async def _run_bounded(tool: Tool, name: str, args: dict[str, Any], workspace: WorkspaceView) -> Observation:
    """The tool's own observation, or a timeout error once its deadline passes (the run is cancelled)."""
    limit = call_deadline(tool)
    task = asyncio.ensure_future(tool.run(args, workspace))
    try:
        done, _ = await asyncio.wait({task}, timeout=limit)
    except asyncio.CancelledError:
        _abandon(task)
        raise
    if not done:
        _abandon(task)
        await asyncio.wait({task}, timeout=_CANCEL_PATIENCE)
        return observe(f"Error: {name} did not finish within {limit:g} s and was stopped. Ask for less at a time "
                       "(a smaller path, a simpler pattern, a narrower glob) and call it again.",
                       is_error=True, timed_out=True)
    return task.result()


def _abandon(task: asyncio.Future[Observation]) -> None:
    """Cancel a call nobody waits for any more; whatever it ends with is dropped, not logged as lost."""
    task.cancel()
    task.add_done_callback(lambda done: done.cancelled() or done.exception())


def _where(args: dict[str, Any]) -> str:
    """The path the call named, in its own spelling, for an OS error's message."""
    path = args.get("path")
    return f" ({spell(path)})" if isinstance(path, str) else ""


def tool_specs(tools: list[Tool]) -> list[dict[str, Any]]:
    """`{"type": "function", "function": {name, description, parameters}}` for each tool, in order."""
    return [
        {"type": "function",
         "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters}}
        for tool in tools
    ]
