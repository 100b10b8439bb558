"""The last fallback: a plain copy of the workspace (`cp -a --reflink=auto`, so copy-on-write file systems
share blocks), bind-mounted at the workspace path when a mount namespace is available."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any, ClassVar

from sandbox.backends.backend import Layout
from sandbox.changes import Change, Manifest, manifest, view_changes


async def copy_tree(source: Path, dest: Path) -> None:
    """Copy a tree with modes, times and symlinks; `cp -a` where present, else shutil in a thread."""
    cp = shutil.which("cp")
    if cp is not None:
        dest.mkdir()
        proc = await asyncio.create_subprocess_exec(
            cp, "-a", "--reflink=auto", f"{source}/.", str(dest),
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )
        _, err = await proc.communicate()
        if proc.returncode == 0:
            return
        raise OSError(f"copying {source} to {dest} failed: {err.decode(errors='replace').strip()}")
    await asyncio.to_thread(shutil.copytree, source, dest, symlinks=True)


class ViewBackend:
    """Shared by the copy-based backends: a view dir, its manifest, bind-mounted at the root."""

    name: ClassVar[str] = "view"
    layered: ClassVar[bool] = False

    def __init__(self) -> None:
        self.before: Manifest = {}

    def mounts(self, root: Path, layout: Layout) -> list[dict[str, Any]]:
        """Bind the view over the real path."""
        return [{"type": "bind", "target": str(root), "source": str(layout.view)}]

    def seen_root(self, layout: Layout) -> Path:
        """The directory whose mode and owner the run sees as the workspace root's."""
        return layout.view

    def changes(self, root: Path, layout: Layout) -> list[Change]:
        """The view against its manifest at creation, classified against the real tree."""
        return view_changes(root, layout.view, self.before)


class Copy(ViewBackend):
    """Everything copied, ignored files and .git included."""

    name: ClassVar[str] = "copy"

    async def prepare(self, root: Path, layout: Layout, *, same_path: bool) -> None:
        """Copy the tree, then take the manifest."""
        await copy_tree(root, layout.view)
        self.before = await asyncio.to_thread(manifest, layout.view)
