"""Run a read-only helper (ripgrep) that can read nothing but the workspace and its own program.

A program that walks a tree by path names, as ripgrep does, can be raced out of it: a folder swapped
for a symlink between its listing and its open sends the open outside. Landlock (Linux 5.13+) closes
that in the kernel: the child may read files and list folders only beneath the allowed trees, and read
and execute only the allowed single files (its program, the libraries it loads, ignore files it
consults), however its paths resolve. Writes are not restricted here (the helper writes nothing).

Landlock restricts the calling thread and what it starts, for good, so each run gets a fresh thread
that restricts itself, starts the child, collects its output and exits.

    available()                     whether this kernel enforces Landlock
    run_readonly(argv, cwd, rules)  run a command under such rules (async, in a thread of its own)
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import functools
import os
import select
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sandbox.process import BoundedBuffer, ProcessResult

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446  # the same on x86_64 and aarch64
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38
ACCESS_EXECUTE, ACCESS_READ_FILE, ACCESS_READ_DIR = 1 << 0, 1 << 2, 1 << 3
_HANDLED = ACCESS_EXECUTE | ACCESS_READ_FILE | ACCESS_READ_DIR
_LIBRARY_DIRS = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib")
_POLL = 0.1  # seconds between checks for a cancelled run while the child is quiet


class _RulesetAttr(ctypes.Structure):
    """struct landlock_ruleset_attr (its first field: what the ruleset restricts)."""
    _fields_ = [("handled_access_fs", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    """struct landlock_path_beneath_attr: rights granted beneath an open path."""
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


@dataclass(frozen=True)
class ReadRules:
    """What the child may read: whole trees (files and listings), and single files (read and run)."""

    trees: tuple[Path, ...]
    files: tuple[Path, ...] = ()


@functools.cache
def _libc() -> ctypes.CDLL:
    """libc, for `syscall` and `prctl`."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


@functools.cache
def available() -> bool:
    """Whether the kernel enforces Landlock (ABI 1 or later) on this architecture."""
    if os.uname().machine not in ("x86_64", "aarch64"):
        return False
    try:
        version = _libc().syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0),
                                  ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except OSError:
        return False
    return version >= 1


def _check(result: int, what: str) -> int:
    """Raise OSError for a failed system call; the result otherwise."""
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"landlock {what}: {os.strerror(code)}")
    return result


def restrict_this_thread(rules: ReadRules) -> None:
    """Confine the calling thread (and every process it starts) to `rules`, irreversibly."""
    libc = _libc()
    attr = _RulesetAttr(_HANDLED)
    ruleset = _check(libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)),
                                  ctypes.c_uint32(0)), "create_ruleset")
    try:
        for path in rules.trees:
            _allow(ruleset, path, _HANDLED, folder=True)
        for path in rules.files:
            _allow(ruleset, path, ACCESS_EXECUTE | ACCESS_READ_FILE, folder=False)
        _check(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
        _check(libc.syscall(_SYS_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)), "restrict_self")
    finally:
        os.close(ruleset)


def _allow(ruleset: int, path: Path, access: int, *, folder: bool) -> None:
    """Add one rule; a path that is missing or not of the kind asked for (a folder or a file) is skipped.

    A folder named as a single file would open everything beneath it, so it is never granted so."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return
    try:
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISDIR(mode) if folder else stat.S_ISREG(mode)):
            return
        attr = _PathBeneathAttr(access, fd)
        result = _libc().syscall(_SYS_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH),
                                 ctypes.byref(attr), ctypes.c_uint32(0))
        if result < 0 and ctypes.get_errno() not in (errno.EINVAL, errno.ENOMSG):
            _check(result, "add_rule")
    finally:
        os.close(fd)


@functools.cache
def program_files(program: str) -> tuple[Path, ...]:
    """The program and what its dynamic loader maps (asked of `ldd` once); the usual library folders
    when ldd cannot say."""
    found = [Path(program), Path("/etc/ld.so.cache")]
    try:
        listing = subprocess.run(["ldd", program], capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        listing = ""
    libraries = [Path(word) for line in listing.splitlines() for word in line.split() if word.startswith("/")]
    if not libraries and "statically linked" not in listing:
        return tuple(found + [Path(folder) for folder in _LIBRARY_DIRS])
    return tuple(found + libraries)


async def run_readonly(argv: Sequence[str], cwd: Path, rules: ReadRules, *, timeout: float, max_bytes: int,
                       pass_fds: Sequence[int] = ()) -> ProcessResult:
    """Run `argv` confined to `rules`, in its own process group, killed at `timeout` or when cancelled.

    Output is stdout and stderr together, its head and tail kept past `max_bytes` (as `run_process`)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[ProcessResult] = loop.create_future()
    cancelled = threading.Event()

    def work() -> None:
        """The thread's body: run, then report back to the loop."""
        try:
            result = _run(argv, cwd, rules, timeout, max_bytes, tuple(pass_fds), cancelled)
        except BaseException as exc:  # handed to the awaiting coroutine
            loop.call_soon_threadsafe(_settle, future, None, exc)
        else:
            loop.call_soon_threadsafe(_settle, future, result, None)

    threading.Thread(target=work, name="tao-landlock", daemon=True).start()
    try:
        return await future
    except asyncio.CancelledError:
        cancelled.set()
        raise


def _settle(future: asyncio.Future[ProcessResult], result: ProcessResult | None, exc: BaseException | None) -> None:
    """Hand a thread's outcome to the awaiting future (unless it was cancelled meanwhile)."""
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        assert result is not None
        future.set_result(result)


def _run(argv: Sequence[str], cwd: Path, rules: ReadRules, timeout: float, max_bytes: int,
         pass_fds: tuple[int, ...], cancelled: threading.Event) -> ProcessResult:
    """In a fresh thread: restrict it, start the child, collect its output."""
    null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)  # opened before the thread may no longer open it
    try:
        restrict_this_thread(rules)
        start = time.monotonic()
        proc = subprocess.Popen(list(argv), cwd=cwd, stdin=null, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True, pass_fds=pass_fds)
    finally:
        os.close(null)
    assert proc.stdout is not None
    kept = BoundedBuffer(max_bytes)
    try:
        timed_out = not _collect(proc, kept, start + timeout, cancelled) or not _reap(proc, start + timeout, cancelled)
    finally:
        _kill_group(proc.pid)  # what is left: everything on timeout, stray background children otherwise
        proc.stdout.close()
        proc.wait()
    return ProcessResult(exit_code=None if timed_out else proc.returncode, output=kept.value(),
                         dropped_bytes=kept.dropped, timed_out=timed_out, duration=time.monotonic() - start)


def _collect(proc: subprocess.Popen[bytes], kept: BoundedBuffer, deadline: float, cancelled: threading.Event) -> bool:
    """Read the child's output to its end; False if the deadline passed or the run was cancelled first."""
    assert proc.stdout is not None
    stream = proc.stdout.fileno()
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or cancelled.is_set():
            return False
        ready, _, _ = select.select([stream], [], [], min(_POLL, left))
        if ready:
            chunk = os.read(stream, 65536)
            if not chunk:
                return True
            kept.add(chunk)


def _reap(proc: subprocess.Popen[bytes], deadline: float, cancelled: threading.Event) -> bool:
    """Wait for the child to exit after its output ended; False if the deadline passed or the run was cancelled."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or cancelled.is_set():
            return False
        try:
            proc.wait(timeout=min(_POLL, left))
            return True
        except subprocess.TimeoutExpired:
            continue


def _kill_group(pgid: int) -> None:
    """SIGKILL a process group that may already be gone."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
