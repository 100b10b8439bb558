"""What every overlay backend does: prepare its layers, say how to mount them at the workspace path,
and list what a run changed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

from sandbox.changes import Change


@dataclass(frozen=True)
class Layout:
    """The paths inside one overlay's state directory."""

    state: Path

    @property
    def upper(self) -> Path:
        """overlayfs upper dir: the overlay's own files and whiteouts."""
        return self.state / "upper"

    @property
    def work(self) -> Path:
        """overlayfs work dir (must be on the same file system as upper)."""
        return self.state / "work"

    @property
    def view(self) -> Path:
        """A full copy of the tree (git-worktree and copy backends)."""
        return self.state / "view"

    @property
    def world(self) -> Path:
        """Where each run's tmpfs of throwaway layers over the rest of the file system is mounted (inside
        the run's private mount namespace only: on disk it stays an empty directory)."""
        return self.state / "world"


class Backend(Protocol):
    """One way to make a copy-on-write view of the workspace."""

    name: ClassVar[str]
    layered: ClassVar[bool]  # True: a mount over the real tree (needs a mount namespace); False: a copy

    async def prepare(self, root: Path, layout: Layout, *, same_path: bool) -> None:
        """Create the layers (or the copy) for a new overlay of `root`; same_path: it will be mounted at root."""
        ...

    def mounts(self, root: Path, layout: Layout) -> list[dict[str, Any]]:
        """The stage's mount entries that put the view at `root` inside the mount namespace."""
        ...

    def changes(self, root: Path, layout: Layout) -> list[Change]:
        """What runs in this overlay changed, compared with the real tree."""
        ...

    def seen_root(self, layout: Layout) -> Path:
        """The directory whose mode and owner the run sees as the workspace root's (changes() omits the root)."""
        ...
