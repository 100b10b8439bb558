"""libc calls of the sandbox stage, each raising StepFailed (the step's name and errno) when it fails."""

from __future__ import annotations

import ctypes
import errno
import os
import struct

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
AT_FDCWD, AT_RECURSIVE = -100, 0x8000
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC = 0x1, 0x2, 0x4, 0x8
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 4, 24, 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
SYS_MOUNT_SETATTR = 442  # the same number on every architecture (new syscalls share one table)
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}

libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
libc.syscall.restype = ctypes.c_long
libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


class StepFailed(Exception):
    """A setup step failed; carries the step name and errno for the report."""

    def __init__(self, step: str, err: int, detail: str = "") -> None:
        super().__init__(step)
        self.step, self.err, self.detail = step, err, detail


def check(result: int, step: str, detail: str = "") -> None:
    """Raise StepFailed when a libc call returned -1."""
    if result == -1:
        raise StepFailed(step, ctypes.get_errno(), detail)


def _enc(text: str | None) -> bytes | None:
    """A str as bytes for libc, None as NULL."""
    return text.encode() if text is not None else None


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None, step: str) -> None:
    """mount(2)."""
    check(libc.mount(_enc(source), _enc(target), _enc(fstype), flags, _enc(data)), step, target)


def unmount(target: str, flags: int, step: str) -> None:
    """umount2(2)."""
    check(libc.umount2(target.encode(), flags), step, target)


def unshare(flags: int, step: str) -> None:
    """unshare(2)."""
    check(libc.unshare(flags), step, hex(flags))


def setns(fd: int, nstype: int, step: str) -> None:
    """setns(2)."""
    check(libc.setns(fd, nstype), step)


def prctl(option: int, arg: int, step: str) -> None:
    """prctl(2) with one argument."""
    check(libc.prctl(option, arg, 0, 0, 0), step)


def pivot_root(new_root: str, put_old: str, step: str) -> None:
    """pivot_root(2), which glibc does not wrap."""
    number = SYS_PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        raise StepFailed(step, errno.ENOSYS, f"no pivot_root number known for {os.uname().machine}")
    check(libc.syscall(number, new_root.encode(), put_old.encode()), step, new_root)


def mount_setattr(path: str, set_attrs: int, *, recursive: bool) -> int:
    """mount_setattr(2) adding `set_attrs`; returns 0 or the errno (ENOSYS on kernels before 5.12)."""
    attr = struct.pack("QQQQ", set_attrs, 0, 0, 0)
    buf = ctypes.create_string_buffer(attr, len(attr))
    flags = AT_RECURSIVE if recursive else 0
    if libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, path.encode(), flags, buf, len(attr)) == 0:
        return 0
    return ctypes.get_errno()


def make_readonly(path: str, step: str, *, recursive: bool = False) -> None:
    """Make the mount at `path` read-only (and nosuid, nodev): mount_setattr, else a bind remount."""
    err = mount_setattr(path, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, recursive=recursive)
    if err == 0:
        return
    if err != errno.ENOSYS or recursive:
        raise StepFailed(step, err, path)
    mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, None, step)


def write_file(path: str, text: str, step: str) -> None:
    """Write a /proc control file in one write(2)."""
    try:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
    except OSError as exc:
        raise StepFailed(step, exc.errno or 0, path) from None
