"""Apply an overlay run's changes to the real tree, as if the run had happened there.

A promoted speculation of a sandboxed tool (a test run that writes a report, say) must leave the
workspace exactly as the real run would have: the same files created, modified and deleted. The change
list is flat and complete (sandbox.changes), so this goes path by path: deletions deepest first, then
creations and modifications parents first.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterable
from pathlib import Path

from sandbox.changes import Change, ChangeKind


def apply_changes(root: Path, changes: Iterable[Change]) -> int:
    """Make the real tree at `root` match the overlay for each changed path; returns paths written."""
    changes = [c for c in changes if c.kind != ChangeKind.TOUCHED]
    deleted = sorted((c for c in changes if c.kind == ChangeKind.DELETED), key=lambda c: -c.path.count("/"))
    for change in deleted:
        _remove(root / change.path)
    written = sorted((c for c in changes if c.kind != ChangeKind.DELETED), key=lambda c: c.path.count("/"))
    for change in written:
        assert change.source is not None
        _place(change.source, root / change.path)
    return len(deleted) + len(written)


def _remove(path: Path) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path)
    else:
        path.unlink()


def _place(source: Path, target: Path) -> None:
    """Put `source`'s entry at `target`: a file's bytes and mode, a symlink's target, a directory's mode."""
    st = os.lstat(source)
    current = os.lstat(target) if os.path.lexists(target) else None
    if current is not None and (stat.S_IFMT(current.st_mode) != stat.S_IFMT(st.st_mode)
                                or stat.S_ISLNK(st.st_mode)):
        _remove(target)
        current = None
    if stat.S_ISDIR(st.st_mode):
        if current is None:
            target.mkdir()
        os.chmod(target, stat.S_IMODE(st.st_mode))
    elif stat.S_ISLNK(st.st_mode):
        os.symlink(os.readlink(source), target)
    elif stat.S_ISREG(st.st_mode):
        shutil.copyfile(source, target, follow_symlinks=False)
        os.chmod(target, stat.S_IMODE(st.st_mode))
    else:
        raise ValueError(f"{target}: cannot promote a {stat.filemode(st.st_mode)[0]!r} entry (device, fifo or "
                         "socket) from an overlay; the speculation is not used")
