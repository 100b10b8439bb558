"""Put new content in place atomically: a temporary file beside the target, fsynced, renamed over it.

A reader sees the old file or the new one, never half of either. Before the rename the target is
checked to be still what was read (same inode, size, mtime and ctime): a change in between refuses
the write instead of losing it. The mode is kept, and the owner where permitted. A target with more
than one hard link is written in place, as edits always were, so every link sees the new content
(the check still runs first); so is one whose folder does not let a file be created beside it.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from dataclasses import dataclass

from sandbox.beneath import Spot
from tools.base import ToolError

_TEMP_PREFIX = ".tao-"  # hidden: list_files and grep skip it while it briefly exists


class Changed(ToolError):
    """The target changed between the read and the write; nothing was written."""


@dataclass(frozen=True)
class Identity:
    """What must be unchanged for a write to go ahead: the file as it was read."""

    device: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, info: os.stat_result) -> Identity:
        """The identity of a file from its status."""
        return cls(info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def place(spot: Spot, data: bytes, *, before: os.stat_result | None, spelling: str, umask: int | None = None) -> None:
    """Write `data` as the entry of `spot`, replacing the file read as `before` (None: a new file).

    Raises Changed when the entry is no longer what was read (or a new file appeared meanwhile)."""
    if before is not None and not os.access(spot.name, os.W_OK, dir_fd=spot.dir_fd, effective_ids=True,
                                            follow_symlinks=False):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), spelling)  # as a plain write would say
    if before is not None and before.st_nlink > 1:
        _write_in_place(spot, data, before, spelling)
        return
    try:
        temp, fd = _create_temp(spot)
    except PermissionError:
        if before is None:
            raise
        _write_in_place(spot, data, before, spelling)  # the folder is read-only to us, the file is not
        return
    try:
        try:
            _write_all(fd, data)
            _carry_over(fd, before, umask)
            os.fsync(fd)
        finally:
            os.close(fd)
        _check(spot, before, spelling)
        os.rename(temp, spot.name, src_dir_fd=spot.dir_fd, dst_dir_fd=spot.dir_fd)
    except BaseException:
        _unlink_quietly(spot, temp)
        raise


def _create_temp(spot: Spot) -> tuple[str, int]:
    """A new, empty, private file beside the target (O_EXCL: never an existing file or a symlink)."""
    for _ in range(16):
        name = f"{_TEMP_PREFIX}{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                         dir_fd=spot.dir_fd)
        except FileExistsError:
            continue
        return name, fd
    raise OSError(errno.EEXIST, "could not pick a temporary file name", spot.rel)


def _carry_over(fd: int, before: os.stat_result | None, umask: int | None) -> None:
    """Give the new file the old one's mode and owner (a new file: the mode a plain create would give)."""
    if before is None:
        os.fchmod(fd, 0o666 & ~(current_umask() if umask is None else umask))
        return
    os.fchmod(fd, stat.S_IMODE(before.st_mode))
    info = os.fstat(fd)
    if (info.st_uid, info.st_gid) != (before.st_uid, before.st_gid):
        try:
            os.fchown(fd, before.st_uid, before.st_gid)
            os.fchmod(fd, stat.S_IMODE(before.st_mode))  # chown clears set-id bits
        except PermissionError:
            pass  # not ours to give away: the file keeps our owner, as a plain rewrite by us would


def _check(spot: Spot, before: os.stat_result | None, spelling: str) -> None:
    """Refuse (Changed) unless the entry is exactly as it was read (or, for a new file, still absent)."""
    try:
        now = os.stat(spot.name, dir_fd=spot.dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        now = None
    if before is None and now is None:
        return
    if before is None or now is None or Identity.of(now) != Identity.of(before):
        raise Changed(f"{spelling} changed while it was being written (by a command or outside Tao), so nothing "
                      f"was written; read_file {spelling} again and redo the change")


def _write_in_place(spot: Spot, data: bytes, before: os.stat_result, spelling: str) -> None:
    """Overwrite the file itself (all its hard links see it), after the same check."""
    fd = spot.open(os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or Identity.of(info) != Identity.of(before):
            raise Changed(f"{spelling} changed while it was being written (by a command or outside Tao), so "
                          f"nothing was written; read_file {spelling} again and redo the change")
        _write_all(fd, data)
        os.ftruncate(fd, len(data))
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    """Write all of `data` from offset 0 (pwrite may write less than asked)."""
    view = memoryview(data)
    offset = 0
    while offset < len(view):
        offset += os.pwrite(fd, view[offset:offset + (1 << 24)], offset)


def _unlink_quietly(spot: Spot, name: str) -> None:
    """Remove a temporary file, if it is still there."""
    try:
        os.unlink(name, dir_fd=spot.dir_fd)
    except OSError:
        pass


def current_umask() -> int:
    """This process's umask, read without changing it (os.umask would, for every thread at once)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022
