"""The real working tree: its root, its version, and paths confined to it."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from sandbox.process import ProcessResult, run_process


class WorkspaceEscape(ValueError):
    """A path that would leave the workspace (through `..`, an absolute path, or a symlink)."""


class Workspace:
    """The authoritative working tree of one session and its version.

    The version counts authoritative changes: every mutating tool call bumps it, so a result computed
    at version N is valid only while the version is still N.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        path = Path(root).expanduser()
        if not path.is_dir():
            raise FileNotFoundError(f"workspace {path} is not a directory; pass --repo with an existing directory")
        self.root: Path = path.resolve()
        self.version: int = 0

    def bump(self) -> int:
        """Record an authoritative change to the tree and return the new version."""
        self.version += 1
        return self.version

    def resolve(self, path: str | os.PathLike[str] = ".") -> Path:
        """Map a workspace-relative (or absolute, inside the root) path to a real path inside the root.

        Symlinks are followed before the check, so a link pointing outside is refused like `..` is.
        The path need not exist yet (write_file creates files).
        """
        raw = Path(path)
        candidate = raw if raw.is_absolute() else self.root / raw
        real = Path(os.path.realpath(candidate))
        if real != self.root and self.root not in real.parents:
            raise WorkspaceEscape(
                f"path {str(path)!r} resolves to {real}, outside the workspace {self.root}; "
                "use a path inside the workspace"
            )
        return real

    def relative(self, path: Path) -> str:
        """The workspace-relative spelling of a path inside the root ('.' for the root itself)."""
        rel = path.relative_to(self.root).as_posix()
        return rel or "."

    async def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ProcessResult:
        """Run a command in the workspace root, in its own process group, killed on timeout.

        Overlays offer the same method, so a tool that runs commands through it can be speculated.
        """
        return await run_process(argv, self.root, timeout=timeout, env=env)
