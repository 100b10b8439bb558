"""The primary backend: kernel overlayfs mounted over the workspace path in a private mount namespace."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any, ClassVar

from sandbox.backends.backend import Layout
from sandbox.changes import Change, overlay_changes


class OverlayFS:
    """Upper and work dirs per overlay; the lower layer is the real workspace, never written."""

    name: ClassVar[str] = "overlayfs"
    layered: ClassVar[bool] = True

    def __init__(self, options: tuple[str, ...] = ()) -> None:
        self.options = options

    async def prepare(self, root: Path, layout: Layout, *, same_path: bool = True) -> None:
        """Empty upper and work dirs; the upper takes the real root's mode and owner, since the merged root
        shows the upper's."""
        layout.upper.mkdir()
        layout.work.mkdir()
        st = os.stat(root)
        if os.geteuid() == 0:
            os.chown(layout.upper, st.st_uid, st.st_gid)
        os.chmod(layout.upper, stat.S_IMODE(st.st_mode))

    def mounts(self, root: Path, layout: Layout) -> list[dict[str, Any]]:
        """overlay with lowerdir=root mounted at root itself."""
        return [{"type": "overlay", "target": str(root), "lower": str(root), "upper": str(layout.upper),
                 "work": str(layout.work), "options": list(self.options)}]

    def seen_root(self, layout: Layout) -> Path:
        """The directory whose mode and owner the run sees as the workspace root's."""
        return layout.upper

    def changes(self, root: Path, layout: Layout) -> list[Change]:
        """The upper dir's files and whiteouts, against the real tree."""
        return overlay_changes(root, layout.upper)


class FuseOverlayFS(OverlayFS):
    """The same layers served by fuse-overlayfs, where kernel overlayfs is not allowed."""

    name: ClassVar[str] = "fuse-overlayfs"

    def __init__(self, binary: str) -> None:
        super().__init__(())
        self.binary = binary

    def mounts(self, root: Path, layout: Layout) -> list[dict[str, Any]]:
        """fuse-overlayfs with lowerdir=root mounted at root itself."""
        return [{**m, "type": "fuse-overlayfs", "binary": self.binary} for m in super().mounts(root, layout)]
