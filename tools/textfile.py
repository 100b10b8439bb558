"""Shared file handling for the tools: confined opening, binary sniffing, decoding, numbered lines.

Every open goes through `sandbox.beneath` (no symlink can lead it out of the workspace, however the
tree changes meanwhile) with O_NONBLOCK, and what was opened is checked with fstat: a FIFO or a device
is refused, never waited on. These functions block: tools call them in a worker thread.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from sandbox import WorkspaceView
from sandbox.beneath import BadPath, Spot, WorkspaceEscape, locate, open_beneath, open_real, real_path
from tools.base import ToolError

BINARY_SNIFF_BYTES = 8192  # a NUL byte in this many leading bytes marks a file as binary
MAX_FILE_BYTES = 32 * 1024 * 1024  # read_file, edit_file and outline refuse larger files
MAX_LINE_CHARS = 2000  # longer lines are cut when shown with numbers
LINE_NUMBER_WIDTH = 6  # like `cat -n`
READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY  # a FIFO opens at once (then is refused)


@dataclass(frozen=True)
class TextFile:
    """A file's bytes and its text as the model may see it."""

    path: Path
    rel: str  # workspace-relative real spelling
    data: bytes
    binary: bool
    utf8: bool  # False: `text` was decoded with U+FFFD for the undecodable bytes
    given: str = ""  # the caller's spelling of the path
    stat: os.stat_result | None = field(default=None, compare=False)  # of the descriptor it was read from

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")

    @property
    def crlf(self) -> bool:
        return b"\r\n" in self.data

    @functools.cached_property
    def digest(self) -> str:
        """What the model saw of this file, as the edit ledger records it."""
        return digest(self.data)


def digest(data: bytes) -> str:
    """The content digest the edit ledger compares (sha256, hex)."""
    return hashlib.sha256(data).hexdigest()


def is_binary(data: bytes) -> bool:
    return b"\0" in data[:BINARY_SNIFF_BYTES]


def spell(path: object) -> str:
    """The caller's own spelling of a path for messages: as given, quoted when it would not read plainly."""
    text = str(path)
    if text and text == text.strip() and text.isprintable():
        return text
    return repr(text)


def path_error(exc: Exception, workspace: WorkspaceView, path: str, *, missing: str = "file not found") -> ToolError:
    """The ToolError for a path that cannot be looked up: outside, unusable, or missing."""
    if isinstance(exc, (WorkspaceEscape, BadPath)):
        return ToolError(str(exc))
    return ToolError(f"{missing}: {spell(path)}{near_names(workspace, path)}")


def load_text(workspace: WorkspaceView, path: str) -> TextFile:
    """Read a regular file inside the workspace; a ToolError if it is missing, a directory or too large."""
    try:
        fd, rel = open_beneath(workspace.root, path, READ_FLAGS)
    except (WorkspaceEscape, BadPath, FileNotFoundError, NotADirectoryError) as exc:
        raise path_error(exc, workspace, path) from None
    try:
        return read_text(fd, rel, path, workspace)
    finally:
        os.close(fd)


def locate_text(workspace: WorkspaceView, path: str) -> tuple[TextFile, Spot]:
    """Like `load_text`, and also where the file lies (the caller closes the Spot): edits rename there."""
    try:
        spot = locate(workspace.root, path)
    except (WorkspaceEscape, BadPath, FileNotFoundError, NotADirectoryError) as exc:
        raise path_error(exc, workspace, path) from None
    try:
        try:
            fd = spot.open(READ_FLAGS)
        except FileNotFoundError:
            raise path_error(FileNotFoundError(), workspace, path) from None
        try:
            return read_text(fd, spot.rel, path, workspace), spot
        finally:
            os.close(fd)
    except BaseException:
        spot.close()
        raise


def read_text(fd: int, rel: str, path: str, workspace: WorkspaceView) -> TextFile:
    """The TextFile of an opened descriptor, refusing what is not a regular file of a readable size."""
    info = os.fstat(fd)
    if stat.S_ISDIR(info.st_mode):
        raise ToolError(f"{spell(path)} is a directory, not a file; use list_files to see what it contains")
    if not stat.S_ISREG(info.st_mode):
        raise ToolError(f"{spell(path)} is not a regular file (a device, socket or pipe); it cannot be read as text")
    if info.st_size > MAX_FILE_BYTES:
        raise ToolError(f"{spell(path)} is {info.st_size} bytes, more than the {MAX_FILE_BYTES} this tool reads; "
                        "use grep to find the part you need, or bash with head/sed")
    data = read_all(fd, MAX_FILE_BYTES)
    if data is None:
        raise ToolError(f"{spell(path)} grew past {MAX_FILE_BYTES} bytes while it was read; "
                        "use grep to find the part you need, or bash with head/sed")
    real = workspace.root / rel if rel != "." else workspace.root
    if is_binary(data):
        return TextFile(real, rel, data, binary=True, utf8=False, given=path, stat=info)
    try:
        data.decode("utf-8")
        utf8 = True
    except UnicodeDecodeError:
        utf8 = False
    return TextFile(real, rel, data, binary=False, utf8=utf8, given=path, stat=info)


def read_all(fd: int, limit: int) -> bytes | None:
    """Every byte from `fd` to its end, or None past `limit` bytes."""
    chunks: list[bytes] = []
    total = 0
    while chunk := os.read(fd, 1 << 20):
        total += len(chunk)
        if total > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def split_lines(text: str) -> list[str]:
    """Lines as editors and grep count them: split on '\\n' only; a final newline ends the last line."""
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def number_lines(lines: list[str], first: int) -> str:
    """`cat -n` style: right-aligned 1-based numbers, a tab, the line (a CR before the newline dropped)."""
    out = []
    for number, line in enumerate(lines, start=first):
        line = line.removesuffix("\r")
        if len(line) > MAX_LINE_CHARS:
            line = f"{line[:MAX_LINE_CHARS]}... [line cut: {len(line) - MAX_LINE_CHARS} more characters]"
        out.append(f"{number:>{LINE_NUMBER_WIDTH}}\t{line}")
    return "\n".join(out)


def near_names(workspace: WorkspaceView, path: str) -> str:
    """A cheap hint for a missing path: similar names in its directory, or that its directory is missing."""
    try:
        real = real_path(workspace.root, path)
    except (WorkspaceEscape, BadPath, OSError):
        return ""
    parent = real.parent if real != workspace.root else real
    shown_parent = workspace.relative(parent)
    try:
        names = list_names(workspace, shown_parent)
    except (FileNotFoundError, NotADirectoryError):
        return f" (its directory {shown_parent} does not exist either); use list_files to look around"
    except OSError:
        return ""
    close = sorted(difflib.get_close_matches(real.name, names, n=3, cutoff=0.6))
    if close:
        shown = ", ".join(workspace.relative(parent / name) for name in close)
        return f"; did you mean {shown}?"
    return f"; use list_files {shown_parent} to see what is there"


def list_names(workspace: WorkspaceView, rel: str) -> list[str]:
    """The entry names of a symlink-free workspace-relative directory, opened without leaving the root."""
    root_fd = os.open(workspace.root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fd = open_real(root_fd, rel, os.O_RDONLY | os.O_DIRECTORY | os.O_NONBLOCK)
    finally:
        os.close(root_fd)
    try:
        return os.listdir(fd)
    finally:
        os.close(fd)
