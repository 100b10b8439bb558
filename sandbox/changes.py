"""What a run in an overlay changed, compared with the real workspace, path by path.

For overlayfs the answer comes from the upper dir: its files (created, modified, or copied up unchanged:
"touched"), its whiteouts (character devices 0/0, or `.wh.NAME` files from fuse-overlayfs: deleted),
opaque dirs (everything of the lower dir hidden) and redirected dirs (a renamed directory). For the
copy-based backends it comes from a stat manifest of the view taken when it was made.

The list is flat and complete: a deleted directory is listed with everything under it, a created one
too, so a later step can promote effects one path at a time.
"""

from __future__ import annotations

import enum
import os
import stat
from dataclasses import dataclass
from pathlib import Path

XATTR_PREFIXES = ("trusted.overlay.", "user.overlay.")
OPAQUE_DIR_MARKER = ".wh..wh..opq"
WHITEOUT_PREFIX = ".wh."


class ChangeKind(enum.StrEnum):
    """How a path differs from the real workspace."""

    CREATED = "created"
    MODIFIED = "modified"  # content, type, permission bits or link target differ
    DELETED = "deleted"
    TOUCHED = "touched"  # copied up, but content and mode are unchanged (only timestamps moved)


@dataclass(frozen=True)
class Change:
    """One changed path: workspace-relative, its kind and type, and where the new content is on the host."""

    path: str
    kind: ChangeKind
    type: str  # "file", "dir", "symlink" or "other" (of the new entry; of the old one when deleted)
    source: Path | None  # None when deleted

    def to_dict(self) -> dict[str, str | None]:
        """JSON-ready form."""
        return {"path": self.path, "kind": str(self.kind), "type": self.type,
                "source": str(self.source) if self.source else None}


def kind_of_mode(mode: int) -> str:
    """'file', 'dir', 'symlink' or 'other'."""
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "other"


def kind_of(st: os.stat_result) -> str:
    """The kind of a stat result (see kind_of_mode)."""
    return kind_of_mode(st.st_mode)


def lstat(path: Path) -> os.stat_result | None:
    """os.lstat, or None if the path does not exist."""
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def xattr(path: Path, name: str) -> bytes | None:
    """The first of `trusted.overlay.<name>` / `user.overlay.<name>` set on path."""
    for prefix in XATTR_PREFIXES:
        try:
            return os.getxattr(path, prefix + name, follow_symlinks=False)
        except OSError:
            continue
    return None


def is_whiteout(path: Path, st: os.stat_result) -> bool:
    """A kernel whiteout: a character device 0/0 (or an empty file marked as one, kernel 6.7+)."""
    if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
        return True
    return stat.S_ISREG(st.st_mode) and st.st_size == 0 and xattr(path, "whiteout") is not None


def same_content(a: Path, b: Path, sa: os.stat_result, sb: os.stat_result) -> bool:
    """Equal type, permission bits and bytes (or link target, or device)."""
    if kind_of(sa) != kind_of(sb) or stat.S_IMODE(sa.st_mode) != stat.S_IMODE(sb.st_mode):
        return False
    if stat.S_ISLNK(sa.st_mode):
        return os.readlink(a) == os.readlink(b)
    if not stat.S_ISREG(sa.st_mode):
        return sa.st_rdev == sb.st_rdev
    if sa.st_size != sb.st_size:
        return False
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            ca, cb = fa.read(1 << 20), fb.read(1 << 20)
            if ca != cb:
                return False
            if not ca:
                return True


def listdir(path: Path | None) -> list[str]:
    """Names in a directory (not following a symlinked dir), or [] if it is not a directory."""
    if path is None:
        return []
    st = lstat(path)
    if st is None or not stat.S_ISDIR(st.st_mode):
        return []
    try:
        return os.listdir(path)
    except OSError:
        return []


def join(rel: str, name: str) -> str:
    """Workspace-relative child path."""
    return f"{rel}/{name}" if rel else name


class _OverlayDiff:
    """Walks the upper layer against the lower (the real tree) and collects changes."""

    def __init__(self, root: Path, upper: Path) -> None:
        self.root, self.upper = root, upper
        self.out: list[Change] = []
        self.todo: list[tuple[str, Path | None, Path | None, Path | None]] = []  # directories still to diff
        self.gone: list[tuple[str, Path]] = []  # deleted real directories whose contents are still to list

    def run(self) -> list[Change]:
        """Walk with explicit stacks, so a tree of any depth is diffed without recursion."""
        self.dir(rel="", upper=self.upper, origin=self.root, real=self.root)
        while self.todo or self.gone:
            while self.todo:
                self.dir(*self.todo.pop())
            while self.gone:
                self.deleted_below(*self.gone.pop())
        return sorted(self.out, key=lambda c: c.path)

    def layer(self, upper: Path | None) -> tuple[dict[str, Path], set[str], bool]:
        """Entries of an upper dir: visible names, whited-out names, and whether it is opaque."""
        visible: dict[str, Path] = {}
        hidden: set[str] = set()
        if upper is None:
            return visible, hidden, False
        opaque = xattr(upper, "opaque") == b"y"
        for name in listdir(upper):
            path = upper / name
            st = lstat(path)
            if st is None:
                continue
            if name == OPAQUE_DIR_MARKER:
                opaque = True
            elif name.startswith(WHITEOUT_PREFIX):
                hidden.add(name[len(WHITEOUT_PREFIX):])
            elif is_whiteout(path, st):
                hidden.add(name)
            else:
                visible[name] = path
        return visible, hidden, opaque

    def dir(self, rel: str, upper: Path | None, origin: Path | None, real: Path | None) -> None:
        """Diff the merged dir (upper over origin) at `rel` against the real dir there."""
        visible, hidden, opaque = self.layer(upper)
        merged: dict[str, tuple[Path, bool]] = {n: (p, True) for n, p in visible.items()}
        if origin is not None and not opaque:
            for name in listdir(origin):
                if name not in merged and name not in hidden:
                    merged[name] = (origin / name, False)
        real_names = set(listdir(real))
        for name in sorted(set(merged) | real_names):
            sub = join(rel, name)
            real_path = real / name if real is not None and name in real_names else None
            if name not in merged:
                assert real_path is not None  # a name outside the merged dir came from the real one
                self.deleted(sub, real_path)
                continue
            node, from_upper = merged[name]
            if not from_upper and origin is not None and real is not None and origin == real:
                continue  # the very same lower entry: unchanged
            self.entry(sub, node, from_upper, origin, real_path)

    def entry(self, sub: str, node: Path, from_upper: bool, parent_origin: Path | None, real: Path | None) -> None:
        """Compare one merged entry with the real entry at the same path (None if there is none)."""
        st, rst = lstat(node), (lstat(real) if real is not None else None)
        if st is None:
            return
        if real is None or rst is None:
            self.created(sub, node, st, from_upper, parent_origin)
            return
        both_dirs = stat.S_ISDIR(st.st_mode) and stat.S_ISDIR(rst.st_mode)
        if both_dirs:
            if stat.S_IMODE(st.st_mode) != stat.S_IMODE(rst.st_mode):
                self.out.append(Change(sub, ChangeKind.MODIFIED, "dir", node))
            if from_upper:
                self.todo.append((sub, node, self.origin_of(node, parent_origin, sub), real))
            else:
                self.todo.append((sub, None, node, real))
            return
        if kind_of(st) != kind_of(rst):
            self.out.append(Change(sub, ChangeKind.MODIFIED, kind_of(st), node))
            if stat.S_ISDIR(rst.st_mode):
                self.gone.append((sub, real))
            if stat.S_ISDIR(st.st_mode):
                self.todo.append((sub, node if from_upper else None,
                                  self.origin_of(node, parent_origin, sub) if from_upper else node, None))
            return
        if not same_content(node, real, st, rst):
            self.out.append(Change(sub, ChangeKind.MODIFIED, kind_of(st), node))
        elif from_upper:
            self.out.append(Change(sub, ChangeKind.TOUCHED, kind_of(st), node))

    def origin_of(self, upper_dir: Path, parent_origin: Path | None, sub: str) -> Path | None:
        """The lower dir merged under an upper dir: none if opaque, the redirect target if renamed."""
        if xattr(upper_dir, "opaque") == b"y" or (upper_dir / OPAQUE_DIR_MARKER).exists():
            return None
        redirect = xattr(upper_dir, "redirect")
        if redirect:
            target = redirect.decode(errors="surrogateescape")
            if target.startswith("/"):
                return self.root / target.lstrip("/")
            return parent_origin / target if parent_origin is not None else None
        if parent_origin is None:
            return None
        candidate = parent_origin / upper_dir.name
        st = lstat(candidate)
        return candidate if st is not None and stat.S_ISDIR(st.st_mode) else None

    def created(self, sub: str, node: Path, st: os.stat_result, from_upper: bool, parent_origin: Path | None) -> None:
        """A new entry, with everything under it if it is a directory."""
        self.out.append(Change(sub, ChangeKind.CREATED, kind_of(st), node))
        if stat.S_ISDIR(st.st_mode):
            if from_upper:
                self.todo.append((sub, node, self.origin_of(node, parent_origin, sub), None))
            else:
                self.todo.append((sub, None, node, None))

    def deleted(self, sub: str, real: Path) -> None:
        """A real entry hidden by a whiteout or an opaque dir, with everything under it."""
        st = lstat(real)
        if st is None:
            return
        self.out.append(Change(sub, ChangeKind.DELETED, kind_of(st), None))
        if stat.S_ISDIR(st.st_mode):
            self.gone.append((sub, real))

    def deleted_below(self, sub: str, real: Path) -> None:
        """Everything under a deleted real directory (its subdirectories are queued, not recursed into)."""
        for name in sorted(listdir(real)):
            self.deleted(join(sub, name), real / name)


def overlay_changes(root: Path, upper: Path) -> list[Change]:
    """Changes recorded in an overlayfs (or fuse-overlayfs) upper dir over the real tree at `root`."""
    return _OverlayDiff(root, upper).run()


Manifest = dict[str, tuple[int, int, int, int, int]]


def manifest(top: Path) -> Manifest:
    """(mode, size, mtime, ctime, inode) of every entry under `top`, by relative path."""
    out: Manifest = {}
    stack = [""]
    while stack:
        rel = stack.pop()
        try:
            scan = os.scandir(top / rel if rel else top)
        except OSError:
            continue
        with scan:
            for entry in scan:
                sub = join(rel, entry.name)
                st = entry.stat(follow_symlinks=False)
                out[sub] = (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
                if stat.S_ISDIR(st.st_mode):
                    stack.append(sub)
    return out


def view_changes(root: Path, view: Path, before: Manifest) -> list[Change]:
    """Changes in a copied view since `before` was taken, classified against the real tree at `root`."""
    now = manifest(view)
    out: list[Change] = []
    for sub in sorted(set(now) | set(before)):
        node, real = view / sub, root / sub
        if sub not in now:
            out.append(Change(sub, ChangeKind.DELETED, kind_of_mode(before[sub][0]), None))
            continue
        st = lstat(node)
        if st is None:
            continue
        if sub not in before:
            out.append(Change(sub, ChangeKind.CREATED, kind_of(st), node))
            continue
        if now[sub] == before[sub]:
            continue
        rst = lstat(real)
        if stat.S_ISDIR(st.st_mode) and rst is not None and stat.S_ISDIR(rst.st_mode):
            if stat.S_IMODE(st.st_mode) != stat.S_IMODE(rst.st_mode):
                out.append(Change(sub, ChangeKind.MODIFIED, "dir", node))
            continue
        if rst is None or not same_content(node, real, st, rst):
            out.append(Change(sub, ChangeKind.MODIFIED, kind_of(st), node))
        else:
            out.append(Change(sub, ChangeKind.TOUCHED, kind_of(st), node))
    return out
