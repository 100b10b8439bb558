"""Notice changes to the working tree made behind Tao's back (the user edits a file while the TUI runs).

A `TreeWatcher` answers one question cheaply: has anything under the root changed since the last
`mark()`? With inotify (Linux, through ctypes) the answer is a non-blocking read of queued events; where
inotify is unavailable or its watch limit is reached, it compares a stat snapshot of the tree
(path, type, mode, size, mtime, ctime, inode), which costs one stat per entry.

inotify does not report a write made through another path to the same inode (a hard link from outside
the tree), so the watcher also keeps the regular files with more than one link and compares their stat
on each check (one stat each). A link made from outside to a file that had a single link is not reported
either: that file is kept from the next change to it that inotify does see.

`.git/objects` is never watched: objects change only together with refs or the index, which are.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import struct
from pathlib import Path

IN_MODIFY, IN_ATTRIB, IN_MOVED_FROM, IN_MOVED_TO = 0x2, 0x4, 0x40, 0x80
IN_CREATE, IN_DELETE, IN_DELETE_SELF, IN_MOVE_SELF = 0x100, 0x200, 0x400, 0x800
IN_Q_OVERFLOW, IN_IGNORED, IN_ISDIR = 0x4000, 0x8000, 0x40000000
IN_ONLYDIR, IN_DONT_FOLLOW, IN_EXCL_UNLINK = 0x01000000, 0x02000000, 0x04000000
IN_NONBLOCK, IN_CLOEXEC = os.O_NONBLOCK, os.O_CLOEXEC
WATCH_MASK = (IN_MODIFY | IN_ATTRIB | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF
              | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW | IN_EXCL_UNLINK)
CHANGE_EVENTS = WATCH_MASK & 0xFFF
EVENT_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len
SKIPPED = (".git/objects",)


Signature = tuple[int, int, int, int, int]  # inode, links, size, mtime, ctime


def signature(st: os.stat_result) -> Signature:
    """The stat fields that change when a file's content or links do."""
    return st.st_ino, st.st_nlink, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def skipped(rel: str) -> bool:
    """Paths whose changes never count (see the module docstring)."""
    return any(rel == s or rel.startswith(s + "/") for s in SKIPPED)


def snapshot(root: Path) -> frozenset[tuple[str, int, int, int, int, int]]:
    """Every entry under root with the stat fields that change when it does (a directory: its mode and inode)."""
    entries: set[tuple[str, int, int, int, int, int]] = set()
    stack = [""]
    while stack:
        rel = stack.pop()
        try:
            scan = os.scandir(root / rel if rel else root)
        except OSError:
            continue
        with scan:
            for entry in scan:
                sub = f"{rel}/{entry.name}" if rel else entry.name
                if skipped(sub):
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(st.st_mode):  # its entries say what changed in it; its times change for temporaries
                    entries.add((sub, st.st_mode, 0, 0, 0, st.st_ino))
                    stack.append(sub)
                else:
                    entries.add((sub, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino))
    return frozenset(entries)


class WatchUnavailable(OSError):
    """inotify cannot watch this tree (no inotify, too many instances, or the watch limit reached)."""


class _Inotify:
    """A recursive inotify watch over a tree; `drain()` says whether any change event arrived."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if self.fd < 0:
            raise WatchUnavailable(ctypes.get_errno(), "inotify_init1 failed")
        self.dirs: dict[int, str] = {}
        self.linked: dict[str, Signature] = {}  # regular files with other hard links, watched by stat
        try:
            self.add_tree("")
        except BaseException:
            self.close()
            raise

    def add_tree(self, top: str) -> None:
        """Watch `top` and every directory below it (symlinks are not followed)."""
        stack = [top]
        while stack:
            rel = stack.pop()
            path = self.root / rel if rel else self.root
            wd = self.libc.inotify_add_watch(self.fd, os.fsencode(path), WATCH_MASK)
            if wd < 0:
                err = ctypes.get_errno()
                if err in (errno.ENOENT, errno.ENOTDIR, errno.EACCES):
                    continue  # gone already, or unreadable: its parent's events still count
                raise WatchUnavailable(err, f"inotify_add_watch {path}: {os.strerror(err)}")
            self.dirs[wd] = rel
            try:
                with os.scandir(path) as scan:
                    for entry in scan:
                        sub = f"{rel}/{entry.name}" if rel else entry.name
                        if entry.is_dir(follow_symlinks=False) and not skipped(sub):
                            stack.append(sub)
                        elif entry.is_file(follow_symlinks=False):
                            self.note(sub)
            except OSError:
                continue

    def note(self, rel: str) -> None:
        """Keep `rel` among the linked files if it is a regular file with more than one link, else drop it."""
        try:
            st = os.lstat(self.root / rel)
        except OSError:
            self.linked.pop(rel, None)
            return
        if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
            self.linked[rel] = signature(st)
        else:
            self.linked.pop(rel, None)

    def forget(self, rel: str) -> None:
        """Drop `rel` and everything under it from the linked files (it was deleted or moved away)."""
        for path in [p for p in self.linked if p == rel or p.startswith(rel + "/")]:
            del self.linked[path]

    def links_changed(self) -> bool:
        """Whether a linked file changed (through any of its names) since the last check."""
        changed = False
        for rel, old in list(self.linked.items()):
            self.note(rel)
            changed = changed or self.linked.get(rel) != old
        return changed

    def drain(self) -> bool:
        """Read every queued event, watch new directories, and say whether anything changed
        (hard-linked files included).

        A path created and removed again within the events read here (a lock file, a temporary) changed
        nothing, as a stat snapshot or an overlay's changes would say: counting it would give a real run a
        version that a promoted run of the same call, whose overlay shows only net changes, does not get."""
        changed = self.links_changed()
        first: dict[str, int] = {}  # path -> mask of its first event read here
        last: dict[str, int] = {}  # path -> mask of its last
        while True:
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return changed or any(not _transient(first[rel], last[rel]) for rel in first)
            offset = 0
            while offset < len(data):
                wd, mask, _cookie, length = EVENT_HEADER.unpack_from(data, offset)
                name = data[offset + 16: offset + 16 + length].split(b"\0", 1)[0].decode(errors="surrogateescape")
                offset += 16 + length
                if mask & IN_Q_OVERFLOW:
                    self.rewatch()
                    return True
                if mask & IN_IGNORED:
                    self.dirs.pop(wd, None)
                    continue
                parent = self.dirs.get(wd)
                if parent is None:
                    continue
                rel = f"{parent}/{name}" if parent and name else (name or parent)
                if skipped(rel) or not mask & CHANGE_EVENTS:
                    continue
                first.setdefault(rel, mask)
                last[rel] = mask
                if mask & (IN_DELETE_SELF | IN_MOVE_SELF):
                    continue  # its parent's event names it (a moved dir's watch already has its new name)
                if mask & (IN_DELETE | IN_MOVED_FROM):
                    self.forget(rel)
                elif mask & IN_ISDIR and mask & (IN_CREATE | IN_MOVED_TO):
                    self.add_tree(rel)
                elif not mask & IN_ISDIR:
                    self.note(rel)

    def rewatch(self) -> None:
        """Start over after the kernel dropped events (queue overflow)."""
        for wd in list(self.dirs):
            self.libc.inotify_rm_watch(self.fd, wd)
        self.dirs.clear()
        self.linked.clear()
        while True:
            try:
                os.read(self.fd, 1 << 16)
            except BlockingIOError:
                break
        self.add_tree("")

    def close(self) -> None:
        """Release the inotify instance."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class TreeWatcher:
    """Has the tree changed since the last `mark()`? `mode` is "inotify", "stat" or "auto"."""

    def __init__(self, root: Path, mode: str = "auto") -> None:
        if mode not in ("auto", "inotify", "stat"):
            raise ValueError(f"watch mode {mode!r} is not one of auto, inotify, stat")
        self.root = root
        self._inotify: _Inotify | None = None
        self._snapshot: frozenset[tuple[str, int, int, int, int, int]] | None = None
        if mode != "stat":
            try:
                self._inotify = _Inotify(root)
            except (WatchUnavailable, OSError, AttributeError):
                if mode == "inotify":
                    raise
        if self._inotify is None:
            self._snapshot = snapshot(root)

    @property
    def mode(self) -> str:
        """"inotify" or "stat": how changes are being detected."""
        return "inotify" if self._inotify is not None else "stat"

    def changed(self) -> bool:
        """True if the tree changed since the last mark; the changes seen become the new baseline."""
        if self._inotify is not None:
            try:
                return self._inotify.drain()
            except WatchUnavailable:
                self._fall_back()
                return True
        current = snapshot(self.root)
        if current != self._snapshot:
            self._snapshot = current
            return True
        return False

    def mark(self) -> None:
        """Accept the tree as it is now (Tao's own change, already counted by a version bump)."""
        self.changed()

    def _fall_back(self) -> None:
        """Switch to stat snapshots when inotify runs out of watches."""
        if self._inotify is not None:
            self._inotify.close()
            self._inotify = None
        self._snapshot = snapshot(self.root)

    def close(self) -> None:
        """Release the inotify instance, if any."""
        if self._inotify is not None:
            self._inotify.close()
            self._inotify = None


def _transient(first: int, last: int) -> bool:
    """A path whose events began with its creation and ended with its removal: it is not there, as before."""
    return bool(first & (IN_CREATE | IN_MOVED_TO)) and bool(last & (IN_DELETE | IN_MOVED_FROM | IN_DELETE_SELF
                                                                     | IN_MOVE_SELF))
