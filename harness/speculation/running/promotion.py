"""What a real call must be to be answered by a speculation: the tool's own view of its arguments.

Canonical keys (harness.calls.canonical) normalise spellings so that predictions generalise; they
must not decide promotion, since two spellings can give different observations (`" a.py "` is not
`a.py`, `start_line: "5"` is an error, `echo  hi` prints itself with two spaces). Promotion goes by the
real call's arguments as the tool's schema accepts them, compared exactly.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from sandbox import WorkspaceView
from sandbox.changes import Change
from sandbox.overlay import Overlay
from sandbox.promote import hard_links
from tools import run_tool
from tools.base import Observation, Tool
from tools.reading import ReadFile
from tools.schema import coerce_args, validate_args
from tools.textfile import TextFile, load_text


def validated(tool: Tool, arguments: Any) -> dict[str, Any] | None:
    """The call's arguments as the tool will run them, or None when its own schema refuses them."""
    try:
        args = coerce_args(tool.name, arguments)
        validate_args(tool.name, tool.parameters, args)
    except Exception:  # ToolError, or a value too odd even to describe (deep nesting)
        return None
    return args


def exact_call(name: str, args: dict[str, Any]) -> str:
    """The identity promotion goes by: the tool and its arguments as given, JSON-equal once nulls are dropped."""
    kept = {key: value for key, value in args.items() if value is not None}
    return f"{name} {json.dumps(kept, sort_keys=True, ensure_ascii=False)}"


class Rendered:
    """read_file answering from a file it already read: `run_tool` validates the call and turns errors into
    observations exactly as for the real call, and the tool's own `render` draws the lines."""

    def __init__(self, tool: ReadFile, file: TextFile) -> None:
        self.name, self.description, self.parameters = tool.name, tool.description, tool.parameters
        self.effect, self.tool, self.file = tool.effect, tool, file

    async def run(self, args: dict[str, Any], workspace: WorkspaceView) -> Observation:
        """What `tool.run(args, workspace)` gives while the file is as it was read."""
        return self.tool.render(self.file, args)


def whole_read(tool: Tool, args: dict[str, Any]) -> tuple[ReadFile, str] | None:
    """The reading tool and the path of a read of a whole file (served line ranges later), else None."""
    path = args.get("path")
    return (tool, path) if isinstance(tool, ReadFile) and set(args) == {"path"} and isinstance(path, str) else None


async def kept_file(tool: ReadFile, path: str, observation: Observation, workspace: WorkspaceView) -> TextFile | None:
    """The file a speculated whole read showed, kept to render line ranges from; None where the tool's own
    rendering of it does not give exactly `observation`, facts included (an error, or a tool that reads
    another way or records more than its rendering does)."""
    if observation.is_error:
        return None
    try:
        file = await asyncio.to_thread(load_text, workspace, path)
    except Exception:  # no file to keep: ranges are then run for real
        return None
    again = await run_tool(Rendered(tool, file), {"path": path}, workspace)
    same = (again.text, again.is_error, again.exit_code, again.truncated_chars, again.data) == (
        observation.text, observation.is_error, observation.exit_code, observation.truncated_chars, observation.data)
    return file if same else None


def vet(overlay: Overlay) -> tuple[list[str], list[Change]]:
    """Why an overlay run may have seen another world than a real run (empty: nothing known), and its changes.

    The overlay's own taints (network, writes outside the workspace, limits, ...) come first; a change to a
    hard-linked file (overlayfs breaks the link; the real run writes through it) is one as well.
    """
    changes = overlay.changes()
    return overlay.taints() or hard_links(overlay.workspace.root, changes), changes
