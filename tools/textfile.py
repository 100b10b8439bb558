"""Shared file handling for the tools: confined lookup, binary sniffing, decoding, numbered lines."""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass
from pathlib import Path

from sandbox import Workspace
from tools.base import ToolError

BINARY_SNIFF_BYTES = 8192  # a NUL byte in this many leading bytes marks a file as binary
MAX_FILE_BYTES = 32 * 1024 * 1024  # read_file, edit_file and outline refuse larger files
MAX_LINE_CHARS = 2000  # longer lines are cut when shown with numbers
LINE_NUMBER_WIDTH = 6  # like `cat -n`


@dataclass(frozen=True)
class TextFile:
    """A file's bytes and its text as the model may see it."""

    path: Path
    rel: str  # workspace-relative spelling
    data: bytes
    binary: bool
    utf8: bool  # False: `text` was decoded with U+FFFD for the undecodable bytes

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")

    @property
    def crlf(self) -> bool:
        return b"\r\n" in self.data


def is_binary(data: bytes) -> bool:
    return b"\0" in data[:BINARY_SNIFF_BYTES]


def existing_file(workspace: Workspace, path: str) -> tuple[Path, str]:
    """Resolve `path` to a regular file inside the workspace, or raise a ToolError saying what is there."""
    real = workspace.resolve(path)
    rel = workspace.relative(real)
    if real.is_dir():
        raise ToolError(f"{rel} is a directory, not a file; use list_files to see what it contains")
    if not real.exists():
        raise ToolError(f"file not found: {path}{_near_names(real, workspace)}")
    if not real.is_file():
        raise ToolError(f"{rel} is not a regular file (a device, socket or pipe); it cannot be read as text")
    return real, rel


def load_text(workspace: Workspace, path: str) -> TextFile:
    """Read a file inside the workspace; a ToolError if it is missing, a directory or too large."""
    real, rel = existing_file(workspace, path)
    size = real.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ToolError(f"{rel} is {size} bytes, more than the {MAX_FILE_BYTES} this tool reads; "
                        "use grep to find the part you need, or bash with head/sed")
    data = real.read_bytes()
    if is_binary(data):
        return TextFile(real, rel, data, binary=True, utf8=False)
    try:
        data.decode("utf-8")
        utf8 = True
    except UnicodeDecodeError:
        utf8 = False
    return TextFile(real, rel, data, binary=False, utf8=utf8)


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


def _near_names(real: Path, workspace: Workspace) -> str:
    """A cheap hint for a missing path: similar names in its directory, or which parent is missing."""
    parent = real.parent
    if not parent.is_dir():
        return f" (its directory {workspace.relative(parent)} does not exist either); use list_files to look around"
    try:
        names = os.listdir(parent)
    except OSError:
        return ""
    close = sorted(difflib.get_close_matches(real.name, names, n=3, cutoff=0.6))
    if close:
        shown = ", ".join(workspace.relative(parent / name) for name in close)
        return f"; did you mean {shown}?"
    return f"; use list_files {workspace.relative(parent)} to see what is there"
