"""Open paths beneath a root without ever leaving it, even while the tree changes underneath.

A `realpath` check followed by an open is a race: a directory swapped for a symlink in between sends
the open outside. Here every lookup starts from a descriptor of the root and never follows a symlink
out of it: `openat2(2)` with RESOLVE_BENEATH where the kernel has it, else (and to decide what
openat2 refuses) a walk that opens one component at a time with O_NOFOLLOW relative to the directory
already held, and follows symlinks by hand only while they stay inside. Symlinks that stay inside the
root work as `realpath` made them work; ones that leave it raise `WorkspaceEscape`.

    locate(root, path)           the directory holding the final entry (a held fd) and its name
    open_beneath(root, path, f)  an fd of what `path` names, and its root-relative real spelling
    open_real(root_fd, rel, f)   an fd of a symlink-free relative path (as found by listing the tree)
    real_path(root, path)        the real path `path` names inside root (`confine`'s answer)

Not covered: a directory *moved* out of the root after it was opened (operations on an open
descriptor go where the directory went); no path lookup can prevent that.
"""

from __future__ import annotations

import ctypes
import errno
import os
import posixpath
import stat
from collections import deque
from dataclasses import dataclass
from pathlib import Path

SYS_OPENAT2 = 437  # the same number on x86_64 and aarch64 (and every architecture since 5.6)
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
MAX_SYMLINKS = 40  # as the kernel's own limit
_DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
_HERE = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC

USE_OPENAT2 = True  # False forces the O_NOFOLLOW walk everywhere (tests run both ways)


class WorkspaceEscape(ValueError):
    """A path that would leave the workspace (through `..`, an absolute path, or a symlink)."""


class BadPath(ValueError):
    """A path no file system can hold (a NUL byte, a character that cannot be encoded)."""


class _OpenHow(ctypes.Structure):
    """struct open_how, as openat2 takes it."""
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


class _Openat2:
    """The openat2 system call through libc's `syscall`; `available` turns False on ENOSYS."""

    def __init__(self) -> None:
        try:
            self._libc = ctypes.CDLL(None, use_errno=True)
            self._libc.syscall.restype = ctypes.c_long
            self.available = os.uname().machine in ("x86_64", "aarch64")
        except OSError:
            self.available = False

    def __call__(self, dir_fd: int, path: str, flags: int, mode: int, resolve: int) -> int:
        how = _OpenHow(flags | os.O_CLOEXEC, mode if flags & os.O_CREAT else 0, resolve)
        fd = self._libc.syscall(SYS_OPENAT2, ctypes.c_int(dir_fd), os.fsencode(path), ctypes.byref(how),
                                ctypes.c_size_t(ctypes.sizeof(how)))
        if fd < 0:
            code = ctypes.get_errno()
            if code == errno.ENOSYS:
                self.available = False
            raise OSError(code, os.strerror(code), path)
        return int(fd)


_openat2 = _Openat2()


def openat2_usable() -> bool:
    """Whether lookups go through openat2 (False: the O_NOFOLLOW walk does all of them)."""
    return USE_OPENAT2 and _openat2.available


def check_path(path: str | os.PathLike[str]) -> str:
    """The path as text, or BadPath when no file name could be spelled so."""
    text = os.fspath(path)
    if not isinstance(text, str):
        raise BadPath(f"path {text!r} is not text; pass the path as a string")
    if "\0" in text:
        raise BadPath(f"path {text!r} contains a NUL byte, which no file name can contain; "
                      "pass the path without it")
    try:
        os.fsencode(text)
    except UnicodeEncodeError:
        raise BadPath(f"path {text!r} contains characters that cannot be encoded as a file name "
                      "(a lone surrogate); pass the path as plain UTF-8 text") from None
    return text


@dataclass
class Spot:
    """Where a path leads: the directory holding the final entry (an O_PATH fd this owns) and its name.

    `name` is "" when the path names the root itself; the entry need not exist."""

    dir_fd: int
    name: str
    rel: str  # the root-relative real spelling of the entry ('.' for the root)

    def close(self) -> None:
        """Release the directory's descriptor."""
        if self.dir_fd >= 0:
            os.close(self.dir_fd)
            self.dir_fd = -1

    def __enter__(self) -> Spot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self, flags: int, mode: int = 0o666) -> int:
        """Open the entry itself, never through a symlink (one that appeared since: ELOOP)."""
        return os.open(self.name or ".", flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=self.dir_fd)


class _Stopped(Exception):
    """The walk met a missing or non-directory component before the last one."""

    def __init__(self, error: OSError, stack: list[str], rest: list[str]) -> None:
        super().__init__(error)
        self.error, self.stack, self.rest = error, stack, rest


def _parts(text: str) -> list[str]:
    """The components of a path, without empty and '.' ones."""
    return [part for part in text.split("/") if part not in ("", ".")]


class _Walk:
    """One component-by-component lookup from a held root descriptor (see the module docstring)."""

    def __init__(self, root: Path, root_fd: int, given: str, make_dirs: bool) -> None:
        self.root, self.root_fd, self.given, self.make_dirs = root, root_fd, given, make_dirs
        self.root_parts = list(root.parts[1:])
        self.stack: list[str] = []  # names of the real directories from the root to `cur`
        self.cur = os.dup(root_fd)
        self.links = 0

    def run(self, parts: deque[str]) -> Spot:
        """Follow `parts` to the final entry; the returned Spot owns `cur`."""
        try:
            return self._run(parts)
        except BaseException:
            os.close(self.cur)
            raise

    def _run(self, parts: deque[str]) -> Spot:
        """The walk itself: one component at a time, symlinks spliced in, `..` re-walked from the root."""
        while parts:
            name = parts.popleft()
            if name in ("", "."):
                continue
            if name == "..":
                self._up(parts)
                continue
            fd = self._open_here(name, parts)
            if fd is None:  # a missing last component: the entry may be created
                return Spot(self.cur, name, self._rel(name))
            mode = os.fstat(fd).st_mode
            if stat.S_ISLNK(mode):
                self._follow(fd, parts)
                continue
            if not parts:
                os.close(fd)
                return Spot(self.cur, name, self._rel(name))
            if not stat.S_ISDIR(mode):
                os.close(fd)
                raise _Stopped(NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), self.given),
                               self.stack + [name], list(parts))
            os.close(self.cur)
            self.cur = fd
            self.stack.append(name)
        return self._spot_of_cur()

    def _open_here(self, name: str, parts: deque[str]) -> int | None:
        """An O_PATH fd of `name` in `cur` (a symlink itself, not its target); None if the last is missing."""
        while True:
            try:
                return os.open(name, _HERE, dir_fd=self.cur)
            except FileNotFoundError:
                if not parts:
                    return None
                if not self.make_dirs:
                    error = FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), self.given)
                    raise _Stopped(error, list(self.stack), [name, *parts]) from None
                try:
                    os.mkdir(name, 0o777, dir_fd=self.cur)
                except FileExistsError:
                    pass  # made by someone else meanwhile: open what is there now

    def _follow(self, fd: int, parts: deque[str]) -> None:
        """Splice a symlink's target into the parts still to walk (an absolute one restarts at the root)."""
        self.links += 1
        try:
            target = os.readlink("", dir_fd=fd)
        finally:
            os.close(fd)
        if self.links > MAX_SYMLINKS:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), self.given)
        if target.startswith("/"):
            inside = _inside(self.root_parts, _parts(target))
            if inside is None:
                raise self._escape()
            self._reset()
            parts.extendleft(reversed(inside))
        else:
            parts.extendleft(reversed(_parts(target)))

    def _up(self, parts: deque[str]) -> None:
        """`..`: the real parent (re-walked from the root), or above the root and back through its own parts."""
        if self.stack:
            self.stack.pop()
            fd = _walk_real(self.root_fd, self.stack)
            os.close(self.cur)
            self.cur = fd
        elif not _climb(self.root_parts, len(self.root_parts) - 1, parts):
            raise self._escape()

    def _reset(self) -> None:
        """Back to the root (an absolute symlink target starts there)."""
        os.close(self.cur)
        self.cur = os.dup(self.root_fd)
        self.stack = []

    def _rel(self, name: str) -> str:
        """The root-relative spelling of `name` in the current folder."""
        return "/".join([*self.stack, name]) if name else ("/".join(self.stack) or ".")

    def _spot_of_cur(self) -> Spot:
        """The walk ended on a directory it holds: the Spot is its parent and its name."""
        if not self.stack:
            return Spot(self.cur, "", ".")
        name = self.stack[-1]
        parent = _walk_real(self.root_fd, self.stack[:-1])
        os.close(self.cur)
        self.cur = parent
        return Spot(parent, name, "/".join(self.stack))

    def _escape(self) -> WorkspaceEscape:
        """The refusal for this walk's path."""
        return escape_error(self.root, self.given)


def escape_error(root: Path, given: str) -> WorkspaceEscape:
    """The refusal, naming where the path leads (computed for the message only)."""
    try:
        real = os.path.realpath(given if given.startswith("/") else root / given)
    except (OSError, ValueError):
        real = given
    return WorkspaceEscape(
        f"path {given!r} resolves to {real}, outside the workspace {root}; use a path inside the workspace"
    )


def _walk_real(root_fd: int, names: list[str]) -> int:
    """An O_PATH fd of a symlink-free directory path below the root (a symlink met now: ENOTDIR)."""
    fd = os.dup(root_fd)
    try:
        for name in names:
            nxt = os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_root(root: Path) -> int:
    """An O_PATH descriptor of the root directory."""
    return os.open(root, _DIR_FLAGS)


def _climb(root_parts: list[str], depth: int, parts: deque[str]) -> bool:
    """Consume parts above the root (at `depth` of its own parts); True once they lead back into it.

    The root is a real path, so its ancestors are real directories and `..` among them is lexical."""
    while parts:
        name = parts.popleft()
        if name in ("", "."):
            continue
        if name == "..":
            depth = max(0, depth - 1)
        elif depth < len(root_parts) and name == root_parts[depth]:
            depth += 1
            if depth == len(root_parts):
                return True
        else:
            return False
    return False


def _inside(root_parts: list[str], parts: list[str]) -> list[str] | None:
    """For an absolute path: the parts left after it enters the root, or None if it never does."""
    queue = deque(parts)
    if not root_parts or _climb(root_parts, 0, queue):
        return list(queue)
    return None


def _start(root: Path, given: str) -> deque[str]:
    """The parts to walk from the root; an absolute path must lead into it (an alias is mapped once)."""
    if not given.startswith("/"):
        return deque(_parts(given))
    inside = _inside(list(root.parts[1:]), _parts(given))
    if inside is None:
        try:
            alias = Path(os.path.realpath(given))  # only maps a name; the walk below decides what opens
        except (OSError, ValueError):
            raise escape_error(root, given) from None
        if alias != root and root not in alias.parents:
            raise escape_error(root, given)
        inside = list(alias.relative_to(root).parts)
    return deque(inside)


def locate(root: Path, path: str | os.PathLike[str], *, make_dirs: bool = False) -> Spot:
    """Where `path` (relative to root, or absolute inside it) leads, following symlinks that stay inside.

    Raises WorkspaceEscape, BadPath, FileNotFoundError or NotADirectoryError (a directory on the way is
    missing or a file; with `make_dirs` missing ones are created), OSError(ELOOP).
    """
    given = check_path(path)
    root_fd = open_root(root)
    try:
        return _Walk(root, root_fd, given, make_dirs).run(_start(root, given))
    except _Stopped as stopped:
        raise stopped.error from None
    finally:
        os.close(root_fd)


def _proc_rel(fd: int, root: Path) -> str | None:
    """The root-relative spelling of an open fd's path, from /proc (None when /proc cannot say)."""
    try:
        link = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    base = str(root)
    if link == base:
        return "."
    prefix = base.rstrip("/") + "/"
    if link.startswith(prefix) and not link.endswith(" (deleted)"):
        return link[len(prefix):]
    return None


def open_beneath(root: Path, path: str | os.PathLike[str], flags: int, mode: int = 0o666) -> tuple[int, str]:
    """Open what `path` names (symlinks followed while inside): its fd and root-relative real spelling.

    Raises what `locate` raises, and OSError from the open itself."""
    given = check_path(path)
    if openat2_usable() and not given.startswith("/"):
        root_fd = open_root(root)
        try:
            fd = _openat2(root_fd, "/".join(_parts(given)) or ".", flags, mode,
                          RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.ELOOP, errno.ENOSYS, errno.EAGAIN, errno.ENAMETOOLONG):
                exc.filename = given
                raise
        else:
            rel = _proc_rel(fd, root)
            if rel is not None:
                return fd, rel
            os.close(fd)
        finally:
            os.close(root_fd)
    for _ in range(3):
        with locate(root, given) as spot:
            try:
                return spot.open(flags, mode), spot.rel
            except OSError as exc:
                if exc.errno != errno.ELOOP:  # ELOOP: the entry became a symlink since; look again
                    exc.filename = given
                    raise
    raise OSError(errno.ELOOP, "the path kept changing while it was opened; try again", given)


def open_real(root_fd: int, rel: str, flags: int) -> int:
    """Open a symlink-free root-relative path (from a listing): any symlink on the way refuses it."""
    if openat2_usable():
        try:
            return _openat2(root_fd, rel, flags, 0, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)
        except OSError as exc:
            if exc.errno not in (errno.ENOSYS, errno.ENAMETOOLONG):
                raise
    names = _parts(rel)
    if ".." in names:
        raise OSError(errno.EXDEV, "'..' in a listed path", rel)
    if not names:
        return os.open(".", flags | os.O_CLOEXEC, dir_fd=root_fd)
    parent = _walk_real(root_fd, names[:-1])
    try:
        return os.open(names[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
    finally:
        os.close(parent)


def real_path(root: Path, path: str | os.PathLike[str]) -> Path:
    """The real path `path` names inside root, as `realpath` would give it; WorkspaceEscape if outside.

    A missing or non-directory component ends the lookup and the rest is joined lexically, as realpath
    does; the answer is a name only: open through `locate` or `open_beneath`, never through it."""
    given = check_path(path)
    root_fd = open_root(root)
    try:
        with _Walk(root, root_fd, given, False).run(_start(root, given)) as spot:
            return root / spot.rel if spot.rel != "." else root
    except _Stopped as stopped:
        return _lexical(root, given, [*stopped.stack, *stopped.rest])
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        return _lexical(root, given, _parts(given))  # a symlink loop: named as realpath names it
    finally:
        os.close(root_fd)


def _lexical(root: Path, given: str, parts: list[str]) -> Path:
    """`parts` joined and normalised by name (past a missing folder there is nothing to resolve)."""
    rest = posixpath.normpath("/".join(parts)) if parts else "."
    if rest == ".." or rest.startswith(("../", "/")):
        raise escape_error(root, given)
    return root / rest if rest != "." else root
