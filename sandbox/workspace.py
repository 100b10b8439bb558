"""The real working tree: its root, its version, and paths confined to it."""

from __future__ import annotations

import os
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path

from sandbox.beneath import BadPath, WorkspaceEscape, real_path
from sandbox.process import DEFAULT_MAX_BYTES, ProcessResult, run_process
from sandbox.watch import TreeWatcher

__all__ = ["BadPath", "Workspace", "WorkspaceEscape", "confine", "relative_to"]


def confine(root: Path, path: str | os.PathLike[str]) -> Path:
    """The real path of `path` (relative to root, or absolute) if it stays inside root, else WorkspaceEscape.

    A name only, for messages and keys: open files through `sandbox.beneath`, which cannot be raced out
    of the root between a check and an open. BadPath (a ValueError) for a NUL byte and the like."""
    return real_path(root, path)


def relative_to(root: Path, path: Path) -> str:
    """The root-relative spelling of a path inside root ('.' for root itself)."""
    rel = path.relative_to(root).as_posix()
    return rel or "."


class Workspace:
    """The authoritative working tree of one session and its version.

    The version counts changes: every authoritative mutating tool call bumps it (`bump`), and so does
    a change made behind Tao's back, noticed by `refresh`. A result computed at version N is valid
    only while the version is still N. Watching starts the first time the version is read.
    """

    def __init__(self, root: str | os.PathLike[str], *, watch: str = "auto") -> None:
        path = Path(root).expanduser()
        if not path.is_dir():
            raise FileNotFoundError(f"workspace {path} is not a directory; pass --repo with an existing directory")
        if watch not in ("auto", "inotify", "stat"):
            raise ValueError(f"watch={watch!r} is not one of auto, inotify, stat")
        self.root: Path = path.resolve()
        self._version = 0
        self._watch_mode = watch
        self._watcher: TreeWatcher | None = None
        self._seen: dict[str, str] = {}  # workspace-relative path -> digest of the content the model last saw

    @property
    def version(self) -> int:
        """The current version; reading it starts watching for outside changes."""
        self._watch()
        return self._version

    @property
    def watch_mode(self) -> str:
        """How outside changes are noticed: "inotify" or "stat" (a stat of every entry per refresh)."""
        return self._watch().mode

    def bump(self) -> int:
        """Record an authoritative change to the tree and return the new version.

        Call it after the change is complete: what changed up to now is Tao's own and will not be
        counted again by `refresh`.
        """
        self._watch().mark()
        self._version += 1
        return self._version

    def refresh(self) -> int:
        """Bump the version if the tree changed behind Tao's back since the last bump or refresh."""
        if self._watch().changed():
            self._version += 1
        return self._version

    def close(self) -> None:
        """Stop watching the tree (also done when the workspace is garbage-collected)."""
        if self._watcher is not None:
            self._watcher.close()
            self._watcher = None

    def _watch(self) -> TreeWatcher:
        """The watcher, started on first use (its baseline is the tree at that moment)."""
        if self._watcher is None:
            self._watcher = TreeWatcher(self.root, self._watch_mode)
            weakref.finalize(self, self._watcher.close)
        return self._watcher

    def note_seen(self, path: object, digest: object) -> None:
        """Record that the model was shown `path` (workspace-relative) with content of this digest.

        Call it only for observations actually delivered to the model (never for a speculative run):
        edit_file refuses to edit a file whose content differs from what the model last saw."""
        if isinstance(path, str) and isinstance(digest, str):
            self._seen[path] = digest

    def seen(self, path: str) -> str | None:
        """The digest of `path`'s content as the model last saw it; None if it never saw the file."""
        return self._seen.get(path)

    def resolve(self, path: str | os.PathLike[str] = ".") -> Path:
        """Map a workspace-relative (or absolute, inside the root) path to a real path inside the root.

        Symlinks are followed before the check, so a link pointing outside is refused like `..` is.
        The path need not exist yet (write_file creates files). A name only: see `confine`.
        """
        return confine(self.root, path)

    def relative(self, path: Path) -> str:
        """The workspace-relative spelling of a path inside the root ('.' for the root itself)."""
        return relative_to(self.root, path)

    async def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        stdin: bytes | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> ProcessResult:
        """Run a command in the workspace root, in its own process group, killed on timeout.

        Overlays offer the same method, so a tool that runs commands through it can be speculated.
        """
        return await run_process(argv, self.root, timeout=timeout, env=env, stdin=stdin, max_bytes=max_bytes)
