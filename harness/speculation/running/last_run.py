"""A call's last real run, kept as the guess of its output the next time it runs (observation warming)."""

from __future__ import annotations

from dataclasses import dataclass

from harness.events import ToolResult


@dataclass(frozen=True)
class LastRun:
    """A call's last real run, at whatever version: the guess of its output the next time it runs."""

    tool: str
    output: str
    failed: bool
    version: int  # the workspace version after it ran

    @classmethod
    def of(cls, tool: str, result: ToolResult) -> LastRun:
        return cls(tool, result.output, result.is_error or result.exit_code not in (None, 0), result.workspace_version)

    def guess(self, tool: str, version: int) -> str | None:
        """The output, as a guess of the same call run at `version`, where it is a fair one.

        A run that failed is no guess once the tree has changed since: an edit after a failing test run is
        meant to change its output, and a wrong guess costs the engine a prefill the real step waits behind.
        """
        if tool != self.tool or (self.failed and version != self.version):
            return None
        return self.output
