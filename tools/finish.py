"""finish: the model ends the task with a summary; the harness intercepts the call by its name."""

from __future__ import annotations

from typing import Any

from sandbox import WorkspaceView
from tools.base import Effect, Observation, ToolError, observe


class Finish:
    """End the task. Its observation is the summary itself; the session loop stops on this name."""

    name = "finish"
    description = (
        "Call this when the task is done (or cannot be done), with a short summary of what you changed "
        "and how you checked it. Ends the session."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {"summary": {"type": "string", "description": "What was done and how it was verified."}},
        "required": ["summary"],
        "additionalProperties": False,
    }
    effect = Effect.PURE

    def __init__(self, timeout: float | None = None) -> None:
        self.timeout = timeout  # seconds run_tool lets one call take (None: DEFAULT_TOOL_TIMEOUT)

    async def run(self, args: dict[str, Any], workspace: WorkspaceView) -> Observation:
        summary: str = args["summary"]
        if not summary.strip():
            raise ToolError("summary is empty; say in a sentence or two what was done and how it was checked")
        return observe(summary, summary=summary)
