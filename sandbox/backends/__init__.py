"""Overlay backends, best first: kernel overlayfs, fuse-overlayfs, a git worktree view, a plain copy.

`choose` picks the first that works for a workspace on this machine (as `sandbox.probe` found it) and
says why each better one was skipped.
"""

from __future__ import annotations

from pathlib import Path

from sandbox.backends.backend import Backend, Layout
from sandbox.backends.copy import Copy
from sandbox.backends.gitworktree import GitWorktree
from sandbox.backends.gitworktree import unavailable as git_unavailable
from sandbox.backends.overlayfs import FuseOverlayFS, OverlayFS
from sandbox.sandbox_errors import BackendUnavailable
from sandbox.probe import Capabilities

ORDER = ("overlayfs", "fuse-overlayfs", "git-worktree", "copy")

__all__ = ["ORDER", "Backend", "Layout", "choose", "make", "unavailable"]


def unavailable(name: str, caps: Capabilities, root: Path) -> str | None:
    """Why backend `name` cannot serve `root` here, or None if it can."""
    if name == "overlayfs":
        return None if caps.overlay_options is not None else caps.notes.get("overlayfs", "overlayfs does not work here")
    if name == "fuse-overlayfs":
        return None if caps.fuse_binary else caps.notes.get("fuse-overlayfs", "fuse-overlayfs is not installed")
    if name == "git-worktree":
        return git_unavailable(root)
    if name == "copy":
        return None
    raise BackendUnavailable(f"unknown overlay backend {name!r}; choose one of {', '.join(ORDER)}")


def make(name: str, caps: Capabilities) -> Backend:
    """A fresh backend object (one per overlay: view backends keep their manifest)."""
    if name == "overlayfs":
        return OverlayFS(caps.overlay_options or ())
    if name == "fuse-overlayfs":
        return FuseOverlayFS(caps.fuse_binary or "fuse-overlayfs")
    if name == "git-worktree":
        return GitWorktree()
    return Copy()


def choose(caps: Capabilities, root: Path, requested: str | None = None) -> tuple[Backend, dict[str, str]]:
    """The backend to use and, by name, why each better one was skipped."""
    skipped: dict[str, str] = {}
    for name in [requested] if requested else ORDER:
        reason = unavailable(name, caps, root)
        if reason is None:
            return make(name, caps), skipped
        skipped[name] = reason
    if requested:
        raise BackendUnavailable(
            f"the {requested} backend cannot be used for {root}: {skipped[requested]}; "
            "leave the backend unset to pick the best one that works, or run `tao sandbox check`"
        )
    raise BackendUnavailable("no overlay backend works here: " + "; ".join(f"{k}: {v}" for k, v in skipped.items()))
