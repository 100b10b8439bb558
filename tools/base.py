"""What every tool is: a name, a JSON schema for its arguments, an effect class, and `run`.

Tools never raise for bad input: a `ToolError` raised inside `run` becomes an error observation
that tells the model what went wrong, so the session goes on.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from sandbox import WorkspaceView

# Outputs longer than this many characters are cut in the middle, with a note saying how much.
MAX_OUTPUT_CHARS = 30_000
# Seconds a tool call may take when the tool names no timeout of its own (`run_tool` enforces it).
DEFAULT_TOOL_TIMEOUT = 60.0


class Effect(enum.StrEnum):
    """How a tool touches the workspace, which decides whether and where it may be speculated."""

    PURE = "pure"  # reads only: speculate freely, valid while the workspace version is unchanged
    SANDBOXED = "sandboxed"  # may write: speculate only inside an overlay, side effects discarded
    MUTATING = "mutating"  # edits and arbitrary shell: authoritative only, bumps the version
    UNKNOWN = "unknown"  # a call of a tool Tao does not have (a typo, another agent's): never speculated


@dataclass(frozen=True)
class Observation:
    """A tool's result as the model will see it, plus structured facts for events and speculation."""

    text: str
    is_error: bool = False
    exit_code: int | None = None
    truncated_chars: int = 0
    data: dict[str, Any] = field(default_factory=dict)


class ToolError(Exception):
    """Bad arguments or an impossible request; becomes an error observation, never a crash."""


@runtime_checkable
class Tool(Protocol):
    """A tool the model can call. Instances may hold per-session state (the bash tool's shell)."""

    name: str
    description: str
    parameters: dict[str, Any]  # JSON schema of the arguments object
    effect: Effect

    async def run(self, args: dict[str, Any], workspace: WorkspaceView) -> Observation: ...


def call_deadline(tool: object) -> float:
    """Seconds `run_tool` lets one call of `tool` run before it stops it with an error observation.

    A tool's `timeout` attribute (default DEFAULT_TOOL_TIMEOUT), plus its `timeout_grace`: a tool that
    enforces its own timeout (bash, run_tests) gets time to stop its command and say so itself."""
    timeout = getattr(tool, "timeout", None)
    grace = getattr(tool, "timeout_grace", 0.0)
    return float(timeout if isinstance(timeout, (int, float)) and timeout > 0 else DEFAULT_TOOL_TIMEOUT) + grace


def truncate(text: str, limit: int = MAX_OUTPUT_CHARS, *, dropped_bytes: int = 0) -> tuple[str, int]:
    """Keep the head and tail of `text` within `limit` characters; return it and how many were cut.

    `dropped_bytes` counts bytes already dropped from the middle before `text` was decoded (a bounded
    capture); the note then names both, so the model learns how much it is not seeing.
    """
    if len(text) <= limit:
        return text, 0
    half = limit // 2
    cut = len(text) - 2 * half
    more = f" and {dropped_bytes} more bytes" if dropped_bytes else ""
    note = f"\n[... {cut} characters{more} cut from the middle of this output ...]\n"
    return text[:half] + note + text[-half:], cut


def observe(text: str, *, is_error: bool = False, exit_code: int | None = None, extra_cut: int = 0,
            **data: Any) -> Observation:
    """Build an observation with the output bounded; `extra_cut` counts bytes dropped before we saw them."""
    bounded, cut = truncate(text, dropped_bytes=extra_cut)
    if extra_cut and not cut:
        bounded += f"\n[... {extra_cut} bytes of output were dropped ...]"
    return Observation(bounded, is_error=is_error, exit_code=exit_code, truncated_chars=cut + extra_cut, data=data)
