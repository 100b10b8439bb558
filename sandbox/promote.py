"""Apply an overlay run's changes to the real tree, as if the run had happened there.

A promoted speculation of a sandboxed tool (a test run that writes a report, say) must leave the
workspace exactly as the real run would have: the same files created, modified and deleted. The change
list is flat and complete (sandbox.changes), so this goes path by path: deletions deepest first, then
creations and modifications parents first.

Nothing here follows a symlink of the real tree: directories are entered one component at a time with
O_NOFOLLOW (a symlink planted between the run and the promotion is refused, not followed out of the
workspace). A file's new bytes go to a temporary file beside it, with the overlay file's mode, owner
(where permitted) and times, which is then renamed over the target: a reader sees the old file or the
new one, never half of one. A change to a file that has other hard links is refused (PromotionRefused):
the real run would have written through the link into a file that may lie outside the workspace, which
a promotion must never do; the caller runs the call for real instead.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Iterable
from pathlib import Path

from sandbox.changes import Change, ChangeKind

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_PLACEABLE = ("file", "dir", "symlink")


class PromotionRefused(ValueError):
    """A change that promotion must not carry over (hard links, a symlink in the way); run the call for real."""


class _NotThere(PromotionRefused):
    """A directory on the way is missing or is a file (not a symlink): nothing below it exists."""


def hard_links(root: Path, changes: Iterable[Change]) -> list[str]:
    """Changes the real run would have made through or with hard links, which promotion cannot reproduce.

    A changed, touched or deleted real file with other links (overlayfs broke the link on copy-up: the real
    run writes through it, maybe into a file outside the workspace), and an entry the run linked, a file or
    a symlink (promotion would place separate copies). A run with any is not like the real one: its
    speculation is tainted.
    """
    reasons: list[str] = []
    for change in changes:
        real = _lstat_beneath(root, change.path)
        if real is not None and stat.S_ISREG(real.st_mode) and real.st_nlink > 1:
            reasons.append(f"changed a hard-linked file: {change.path} ({real.st_nlink} links)")
        try:
            new = os.lstat(change.source) if change.source is not None else None
        except OSError:
            continue
        if new is not None and not stat.S_ISDIR(new.st_mode) and new.st_nlink > 1:
            reasons.append(f"made a hard link: {change.path} ({new.st_nlink} links)")
    return reasons


def refusals(root: Path, changes: Iterable[Change]) -> list[str]:
    """Why these changes cannot be promoted as the real run made them; empty when they can.

    Checked before anything is written: hard links (see `hard_links`), an entry that is not a file, dir or
    symlink, an entry gone from the overlay, a renamed directory whose old content would be needed after
    its old paths were replaced.
    """
    changes = list(changes)
    reasons = hard_links(root, changes)
    changes = [c for c in changes if c.kind != ChangeKind.TOUCHED]
    for change in changes:
        if change.source is None:
            continue
        if change.type not in _PLACEABLE:
            reasons.append(f"made a device, fifo or socket: {change.path}")
        elif not os.path.lexists(change.source):
            reasons.append(f"its new entry is gone: {change.path}")
    closed = sorted(p for p in {c.path.rpartition("/")[0] for c in changes} if not _writable(root, p))
    if closed:
        reasons.append(f"cannot add or replace entries in {', '.join(closed[:3])} (no write permission)")
    moved = [c.path for c in changes if c.source is not None and c.source.is_relative_to(root)]
    if moved:
        reasons.append(f"renamed a directory ({len(moved)} entries such as {moved[0]} come from elsewhere in the tree)")
    return reasons


def apply_changes(root: Path, changes: Iterable[Change]) -> int:
    """Make the real tree at `root` match the overlay for each changed path; returns paths written.

    Raises PromotionRefused, before writing anything, when `refusals` finds a reason; and while writing
    if a directory of the path turned out to be a symlink or a file in the real tree.
    """
    changes = list(changes)
    reasons = refusals(root, changes)
    if reasons:
        raise PromotionRefused(f"the run's changes cannot be promoted into {root}: {'; '.join(reasons)}; "
                               "run the call for real instead")
    deleted = sorted((c for c in changes if c.kind == ChangeKind.DELETED), key=lambda c: -c.path.count("/"))
    written = sorted((c for c in changes if c.kind in (ChangeKind.CREATED, ChangeKind.MODIFIED)),
                     key=lambda c: c.path.count("/"))
    with _Cursor(root) as cursor:
        for change in deleted:
            _remove(cursor, _parts(change.path))
        for change in written:
            assert change.source is not None
            _place(cursor, change.source, _parts(change.path))
        for change in changes:
            if change.kind == ChangeKind.TOUCHED and change.source is not None:
                _retouch(cursor, change.source, _parts(change.path))
    return len(deleted) + len(written)


def _writable(root: Path, rel: str) -> bool:
    """Whether entries can be added to or removed from directory root/rel (one the promotion makes is)."""
    path = root / rel if rel else root
    return not path.is_dir() or os.access(path, os.W_OK | os.X_OK, effective_ids=os.access in os.supports_effective_ids)


def _parts(rel: str) -> list[str]:
    """The components of a workspace-relative path; refused if any would leave the directory it is in."""
    parts = rel.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise PromotionRefused(f"{rel!r} is not a plain path below the workspace root; nothing was promoted for it")
    return parts


def _lstat_beneath(root: Path, rel: str) -> os.stat_result | None:
    """lstat of root/rel, None if missing or if a directory on the way is not a real directory."""
    fd = -1
    try:
        fd = os.open(root, _DIR_FLAGS)
        *dirs, name = rel.split("/")
        for part in dirs:
            sub = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = sub
        return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return None
    finally:
        if fd >= 0:
            os.close(fd)


def _identity(fd: int) -> tuple[int, int]:
    """Device and inode of an open entry: what a directory is, whatever its name."""
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


class _Cursor:
    """One open directory of the real tree that moves between directories without following a symlink:
    down by O_NOFOLLOW opens, up by '..' checked against the directory it came down through."""

    def __init__(self, root: Path) -> None:
        self.fd = os.open(root, _DIR_FLAGS)
        self.root = root
        self.parts: list[str] = []
        self.ids = [_identity(self.fd)]

    def __enter__(self) -> _Cursor:
        """The cursor, at the root."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the directory it holds."""
        os.close(self.fd)

    def at(self, parts: list[str]) -> int:
        """The descriptor of the directory root/parts; PromotionRefused if it is not a real directory."""
        common = 0
        while common < min(len(parts), len(self.parts)) and parts[common] == self.parts[common]:
            common += 1
        while len(self.parts) > common:
            self._move(os.open("..", _DIR_FLAGS, dir_fd=self.fd), None)
        for part in parts[common:]:
            try:
                fd = os.open(part, _DIR_FLAGS, dir_fd=self.fd)
            except OSError as exc:
                where = "/".join([*self.parts, part])
                found = _lstat_at(self.fd, part)
                error = PromotionRefused if found is not None and stat.S_ISLNK(found.st_mode) else _NotThere
                raise error(f"{where} is not a directory in the real tree ({exc.strerror}): a symlink or file "
                            "took its place after the run; nothing is written through it") from None
            self._move(fd, part)
        return self.fd

    def _move(self, fd: int, part: str | None) -> None:
        """Step into `part` (or up, when None) through the directory opened as `fd`."""
        if part is None:
            self.parts.pop()
            self.ids.pop()
            if _identity(fd) != self.ids[-1]:
                os.close(fd)
                raise PromotionRefused(f"a directory of {self.root} moved while changes were promoted into it")
        else:
            self.parts.append(part)
            self.ids.append(_identity(fd))
        os.close(self.fd)
        self.fd = fd


def _lstat_at(fd: int, name: str) -> os.stat_result | None:
    """lstat of `name` in the directory `fd`, None if there is no such entry."""
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _remove(cursor: _Cursor, parts: list[str]) -> None:
    """Remove root/parts, a whole directory tree included (iteratively: any depth); gone already is fine."""
    try:
        parent = cursor.at(parts[:-1])
    except _NotThere:
        return  # a directory above it was removed, or replaced by a file, by an earlier change
    st = _lstat_at(parent, parts[-1])
    if st is None:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(parts[-1], dir_fd=cursor.at(parts[:-1]))
        return
    stack = [parts]
    while stack:
        top = stack[-1]
        fd = cursor.at(top)
        subdirs = []
        with os.scandir(fd) as scan:
            entries = list(scan)
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                subdirs.append([*top, entry.name])
            else:
                os.unlink(entry.name, dir_fd=fd)
        if subdirs:
            stack.extend(subdirs)
            continue
        stack.pop()
        os.rmdir(top[-1], dir_fd=cursor.at(top[:-1]))


def _place(cursor: _Cursor, source: Path, parts: list[str]) -> None:
    """Put `source`'s entry at root/parts: a file's bytes, a symlink's target, a directory; with mode and owner."""
    st = os.lstat(source)
    name = parts[-1]
    current = _lstat_at(cursor.at(parts[:-1]), name)
    if current is not None and (stat.S_IFMT(current.st_mode) != stat.S_IFMT(st.st_mode)
                                or stat.S_ISLNK(st.st_mode)):
        _remove(cursor, parts)
        current = None
    parent = cursor.at(parts[:-1])
    if stat.S_ISDIR(st.st_mode):
        if current is None:
            os.mkdir(name, 0o700, dir_fd=parent)
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
        try:
            _own(fd, st)
        finally:
            os.close(fd)
    elif stat.S_ISLNK(st.st_mode):
        os.symlink(os.readlink(source), name, dir_fd=parent)
        try:
            os.chown(name, st.st_uid, st.st_gid, dir_fd=parent, follow_symlinks=False)
        except PermissionError:
            pass  # not ours to give away: as the real run's user would have left it
    elif stat.S_ISREG(st.st_mode):
        _write_file(parent, name, source, st)
    else:
        raise PromotionRefused(f"{'/'.join(parts)}: cannot promote a {stat.filemode(st.st_mode)[0]!r} entry "
                               "(device, fifo or socket) from an overlay; the speculation is not used")


def _retouch(cursor: _Cursor, source: Path, parts: list[str]) -> None:
    """A touched entry kept its bytes and mode: give the real one the owner (and a file the times) the run
    gave it (a chown or a touch), where permitted."""
    st = os.lstat(source)
    parent, name = cursor.at(parts[:-1]), parts[-1]
    real = _lstat_at(parent, name)
    if real is None or stat.S_IFMT(real.st_mode) != stat.S_IFMT(st.st_mode) or stat.S_ISDIR(st.st_mode):
        return
    if stat.S_ISLNK(st.st_mode):
        if (real.st_uid, real.st_gid) != (st.st_uid, st.st_gid):
            try:
                os.chown(name, st.st_uid, st.st_gid, dir_fd=parent, follow_symlinks=False)
            except PermissionError:
                pass
        return
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=parent)
    except OSError:
        return  # not ours to open: as the real run's user would have left it
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            if (real.st_uid, real.st_gid) != (st.st_uid, st.st_gid):
                _own(fd, st)
            os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))
    except PermissionError:
        pass
    finally:
        os.close(fd)


def _own(fd: int, st: os.stat_result) -> None:
    """Give an open entry the overlay entry's owner (where permitted) and then its mode (chown clears setuid)."""
    try:
        os.fchown(fd, st.st_uid, st.st_gid)
    except PermissionError:
        pass  # not ours to give away: as the real run's user would have left it
    os.fchmod(fd, stat.S_IMODE(st.st_mode))


def _write_file(parent: int, name: str, source: Path, st: os.stat_result) -> None:
    """Write `source`'s bytes to a temporary file in `parent`, then rename it over `name` (atomic)."""
    temp = f".tao-promote-{secrets.token_hex(6)}"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=parent)
    try:
        src = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            while chunk := os.read(src, 1 << 20):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view):]
        finally:
            os.close(src)
        _own(fd, st)
        os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))
        os.close(fd)
        fd = -1
        os.rename(temp, name, src_dir_fd=parent, dst_dir_fd=parent)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        try:
            os.unlink(temp, dir_fd=parent)
        except OSError:
            pass
        raise
