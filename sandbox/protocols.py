"""The surface tools use, met by both Workspace and Overlay (so a tool can be run speculatively)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from sandbox.process import ProcessResult


@runtime_checkable
class WorkspaceView(Protocol):
    """A working tree a tool can act on: the real Workspace, or an Overlay of it at the same path."""

    root: Path

    @property
    def version(self) -> int: ...

    def resolve(self, path: str | os.PathLike[str] = ".") -> Path: ...

    def relative(self, path: Path) -> str: ...

    async def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        stdin: bytes | None = None,
        max_bytes: int = ...,
    ) -> ProcessResult: ...
