"""Fallback for machines without overlayfs: a checkout of HEAD plus the uncommitted changes.

Built without touching the real repository (unlike `git worktree add`, which registers the worktree
under .git/worktrees): HEAD is read into a temporary index and checked out into the view
(`read-tree` + `checkout-index`, git's fast C path); then every path `git status` reports (modified,
staged, deleted, untracked) is copied from the workspace or removed; tracked files get the real
modes and mtimes (so make-style tools see the same staleness). The view gets its own `.git`: the
real one's metadata (HEAD, refs, index, config) with `objects/info/alternates` pointing at the real
objects, so git commands in the view answer as in the workspace and write only to the view.

Not in the view: ignored files (build outputs, virtualenvs) and empty untracked directories.
gitpython is imported lazily, here only: the rest of sandbox/ is stdlib.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any, ClassVar

from sandbox.backends.backend import Layout
from sandbox.backends.copy import ViewBackend
from sandbox.changes import manifest
from sandbox.statedir import remove_tree

QUIET_GIT = {"GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0"}


def unavailable(root: Path) -> str | None:
    """Why this backend cannot serve `root`, or None if it can."""
    if shutil.which("git") is None:
        return "git is not installed"
    try:
        import git
    except ImportError:
        return "gitpython is not installed (pip install gitpython)"
    dot_git = root / ".git"
    if not dot_git.is_dir() or dot_git.is_symlink():
        return f"{root} is not the top of a git repository with a .git directory"
    if not (dot_git / "objects").is_dir():
        return f"{dot_git} has no objects directory"
    import git

    try:
        repo = git.Repo(root)
        if not repo.head.is_valid():
            return "the repository has no commit yet (HEAD is unborn)"
    except (git.InvalidGitRepositoryError, git.NoSuchPathError, ValueError) as exc:
        return f"not a usable git repository: {exc}"
    return None


def copy_dir(src: Path, dst: Path) -> None:
    """Copy a directory tree with modes, times and symlinks, at any depth (`cp -a`; shutil where it is missing)."""
    cp = shutil.which("cp")
    if cp is None:
        shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)
        return
    dst.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([cp, "-a", f"{src}/.", str(dst)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if done.returncode != 0:
        raise OSError(f"copying {src} to {dst} failed: {done.stderr.decode(errors='replace').strip()}")


def make_parents(path: Path) -> None:
    """Create the missing parent directories of `path`, top down, without recursion (any depth)."""
    missing = []
    parent = path.parent
    while not parent.is_dir():
        missing.append(parent)
        parent = parent.parent
    for directory in reversed(missing):
        directory.mkdir()


def copy_entry(src: Path, dst: Path) -> None:
    """Copy one file or symlink (not following it), or a directory, replacing whatever is at dst."""
    make_parents(dst)
    remove_entry(dst)
    if src.is_dir() and not src.is_symlink():
        copy_dir(src, dst)
    else:
        shutil.copy2(src, dst, follow_symlinks=False)


def remove_entry(path: Path) -> None:
    """Remove a file, symlink or directory (at any depth) if present."""
    if path.is_dir() and not path.is_symlink():
        if not remove_tree(path):
            raise OSError(f"could not remove {path} from the view")
    elif path.exists() or path.is_symlink():
        path.unlink()


def copy_git_metadata(real_git: Path, view_git: Path, objects_at: Path) -> None:
    """Everything of .git except objects; the real objects are borrowed through alternates at `objects_at`."""
    shutil.copytree(real_git, view_git, symlinks=True,
                    ignore=lambda d, names: ["objects"] if Path(d) == real_git else [])
    info = view_git / "objects" / "info"
    info.mkdir(parents=True)
    (view_git / "objects" / "pack").mkdir()
    (info / "alternates").write_text(f"{objects_at}\n")


def sync_metadata(root: Path, view: Path, paths: list[str]) -> None:
    """Give checked-out files the real file's permission bits and mtime."""
    for rel in paths:
        real, mine = root / rel, view / rel
        try:
            rst, vst = os.lstat(real), os.lstat(mine)
        except OSError:
            continue
        if stat.S_IFMT(rst.st_mode) != stat.S_IFMT(vst.st_mode):
            continue
        if not stat.S_ISLNK(vst.st_mode) and stat.S_IMODE(rst.st_mode) != stat.S_IMODE(vst.st_mode):
            os.chmod(mine, stat.S_IMODE(rst.st_mode))
        os.utime(mine, ns=(rst.st_atime_ns, rst.st_mtime_ns), follow_symlinks=False)


def build_view(root: Path, view: Path, scratch: Path, objects_at: Path) -> None:
    """Checkout HEAD into `view`, apply the uncommitted changes, give it its own .git."""
    import git

    repo = git.Repo(root)
    env = {**QUIET_GIT, "GIT_INDEX_FILE": str(scratch / "head.index")}
    view.mkdir()
    repo.git.read_tree("HEAD", env=env)
    repo.git.checkout_index("-a", "-f", f"--prefix={view}/", env=env)
    staged = repo.git.ls_files("-s", "-z", env=QUIET_GIT)
    tracked: list[str] = []
    for record in filter(None, staged.split("\0")):
        meta, path = record.split("\t", 1)
        tracked.append(path)
        if meta.startswith("160000") and (root / path).is_dir():  # a submodule: its files as they are
            copy_dir(root / path, view / path)
    status = repo.git.status("--porcelain=v1", "-z", "--untracked-files=all", "--no-renames", env=QUIET_GIT)
    for record in filter(None, status.split("\0")):
        path = record[3:]
        src = root / path
        if os.path.lexists(src):
            copy_entry(src, view / path)
        else:
            remove_entry(view / path)
    sync_metadata(root, view, tracked)
    copy_git_metadata(root / ".git", view / ".git", objects_at)


class GitWorktree(ViewBackend):
    """HEAD checked out, plus the uncommitted changes, with a private .git borrowing the objects."""

    name: ClassVar[str] = "git-worktree"

    async def prepare(self, root: Path, layout: Layout, *, same_path: bool) -> None:
        """Build the view in a thread (git and file copies), then take the manifest.

        At the same path the real .git/objects is hidden under the view, so it is bind-mounted
        read-only at `<state>/objects` and the alternates point there.
        """
        objects_at = self.objects_mount(layout) if same_path else (root / ".git" / "objects").resolve()
        if same_path:
            objects_at.mkdir()
        await asyncio.to_thread(build_view, root, layout.view, layout.state, objects_at)
        self.before = await asyncio.to_thread(manifest, layout.view)

    @staticmethod
    def objects_mount(layout: Layout) -> Path:
        """Where the real objects appear inside the mount namespace."""
        return layout.state / "objects"

    def mounts(self, root: Path, layout: Layout) -> list[dict[str, Any]]:
        """The real objects (read-only) where the alternates point, then the view over the real path."""
        objects = {"type": "bind", "source": str((root / ".git" / "objects").resolve()),
                   "target": str(self.objects_mount(layout)), "readonly": True}
        return [objects, *super().mounts(root, layout)]
