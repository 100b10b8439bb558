"""The tools that look at files and folders without changing them: read_file and list_files."""

from __future__ import annotations

import asyncio
import os
import stat
from dataclasses import dataclass, field
from typing import Any

from sandbox import WorkspaceView
from sandbox.beneath import BadPath, WorkspaceEscape, locate, open_real
from tools.base import MAX_OUTPUT_CHARS, Effect, Observation, ToolError, observe
from tools.schema import number
from tools.textfile import TextFile, load_text, number_lines, spell, split_lines

MAX_READ_LINES = 2000
_NOTE_ROOM = 400  # characters kept free under the output cap for the notes around the lines


class ReadFile:
    """Show a text file with `cat -n` line numbers, the whole file or a 1-based inclusive range."""

    name = "read_file"
    description = (
        "Read a text file, each line prefixed with its line number and a tab. Shows at most "
        f"{MAX_READ_LINES} lines; pass start_line and end_line (1-based, inclusive) to read other parts."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File path relative to the workspace root."},
            "start_line": {"type": "integer", "minimum": 1, "description": "First line to show (1-based)."},
            "end_line": {"type": "integer", "minimum": 1, "description": "Last line to show (inclusive)."},
        },
        "required": ["path"],
        "additionalProperties": False,
    }
    effect = Effect.PURE

    def __init__(self, timeout: float | None = None) -> None:
        self.timeout = timeout  # seconds run_tool lets one call take (None: DEFAULT_TOOL_TIMEOUT)

    async def run(self, args: dict[str, Any], workspace: WorkspaceView) -> Observation:
        return await asyncio.to_thread(self._run, args, workspace)

    def _run(self, args: dict[str, Any], workspace: WorkspaceView) -> Observation:
        return self.render(load_text(workspace, args["path"]), args)

    def render(self, file: TextFile, args: dict[str, Any]) -> Observation:
        """The observation for `args` from a file already read (speculation serves ranges this way).

        `data` carries the digest of the whole file, which the session records once the model sees it."""
        if file.binary:
            return observe(f"{file.rel} is a binary file ({len(file.data)} bytes); read_file shows text only. "
                           f"Use bash (for example `xxd {file.rel} | head`) to inspect it.", path=file.rel, binary=True,
                           digest=file.digest)
        lines = split_lines(file.text)
        if not lines:
            return observe(f"{file.rel} is empty (0 lines).", path=file.rel, total_lines=0, digest=file.digest)
        spelling = spell(args.get("path", file.given or file.rel))
        start, end, notes = _line_range(args.get("start_line"), args.get("end_line"), len(lines), spelling)
        shown_end = _fit_lines(lines, start, end)
        if shown_end < end:
            notes.append(f"showing lines {start}-{shown_end} of {len(lines)}; pass start_line/end_line for more "
                         f"(next: start_line={shown_end + 1})")
        elif start > 1 or end < len(lines):
            notes.append(f"showing lines {start}-{end} of {len(lines)}")
        text = _header(file) + number_lines(lines[start - 1:shown_end], start)
        if notes:
            text += "\n[" + "; ".join(notes) + "]"
        return observe(text, path=file.rel, start_line=start, end_line=shown_end, total_lines=len(lines),
                       digest=file.digest)


def _header(file: TextFile) -> str:
    if file.utf8:
        return ""
    return f"[note: {file.rel} is not valid UTF-8; undecodable bytes are shown as \ufffd]\n"


def _line_range(start: int | None, end: int | None, total: int, rel: str) -> tuple[int, int, list[str]]:
    """Check a requested range against the file; an end past the last line is clamped with a note."""
    notes: list[str] = []
    start = start or 1
    if start > total:
        raise ToolError(f"start_line {number(start)} is past the end of {rel}, which has {total} lines; "
                        f"pass a start_line between 1 and {total}")
    if end is None:
        return start, total, notes  # _fit_lines applies the line and character caps
    if end < start:
        raise ToolError(f"end_line {number(end)} is before start_line {number(start)}; pass start_line <= end_line")
    if end > total:
        notes.append(f"end_line {number(end)} is past the end of the file, which has {total} lines")
        end = total
    return start, end, notes


def _fit_lines(lines: list[str], start: int, end: int) -> int:
    """The last line number that fits both the line cap and the character cap (at least `start`)."""
    end = min(end, start + MAX_READ_LINES - 1)
    budget = MAX_OUTPUT_CHARS - _NOTE_ROOM
    for line in range(start, end + 1):
        budget -= len(number_lines([lines[line - 1]], line)) + 1
        if budget < 0:
            return max(start, line - 1)
    return end


# --- list_files -----------------------------------------------------------------------------------

SKIPPED_NAMES = frozenset({".git", "__pycache__", ".venv", "node_modules"})
MAX_LIST_ENTRIES = 500


@dataclass
class _Listing:
    max_entries: int
    lines: list[str] = field(default_factory=list)
    total: int = 0

    def add(self, line: str) -> None:
        self.total += 1
        if len(self.lines) < self.max_entries:
            self.lines.append(line)


class ListFiles:
    """A sorted tree of a folder, a few levels deep, without hidden and generated folders."""

    name = "list_files"
    description = (
        "List files and folders as an indented tree (folders end with '/'), sorted by name, skipping hidden "
        "entries, .git, __pycache__, .venv and node_modules. Default depth 2."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "Folder relative to the workspace root (default '.')."},
            "depth": {"type": "integer", "minimum": 1, "description": "How many levels to show (default 2)."},
        },
        "required": [],
        "additionalProperties": False,
    }
    effect = Effect.PURE

    def __init__(self, max_entries: int = MAX_LIST_ENTRIES, timeout: float | None = None) -> None:
        self.max_entries = max_entries
        self.timeout = timeout  # seconds run_tool lets one call take (None: DEFAULT_TOOL_TIMEOUT)

    async def run(self, args: dict[str, Any], workspace: WorkspaceView) -> Observation:
        return await asyncio.to_thread(self._run, args, workspace)

    def _run(self, args: dict[str, Any], workspace: WorkspaceView) -> Observation:
        path = args.get("path") or "."
        fd, rel = _open_folder(workspace, path, args.get("path"))
        try:
            listing = _Listing(self.max_entries)
            _walk(fd, args.get("depth") or 2, listing)
        finally:
            os.close(fd)
        if listing.total == 0:
            return observe(f"{rel}/ is empty (hidden and skipped entries aside).", path=rel, entries=0)
        text = "\n".join([f"{rel}/", *listing.lines])
        if listing.total > len(listing.lines):
            text += (f"\n[showing {len(listing.lines)} of {listing.total} entries; list a subfolder "
                     "or pass a smaller depth to see the rest]")
        return observe(text, path=rel, entries=listing.total)


def _open_folder(workspace: WorkspaceView, path: str, given: Any) -> tuple[int, str]:
    """A descriptor of the folder to list and its workspace-relative spelling; ToolErrors the model can act on."""
    try:
        spot = locate(workspace.root, path)
    except (FileNotFoundError, NotADirectoryError):
        raise ToolError(f"folder not found: {spell(given)}; use list_files on its parent to look around") from None
    except (WorkspaceEscape, BadPath) as exc:
        raise ToolError(str(exc)) from None
    with spot:
        try:
            info = os.stat(spot.name or ".", dir_fd=spot.dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            raise ToolError(f"folder not found: {spell(given)}; use list_files on its parent to look around") from None
        if stat.S_ISREG(info.st_mode):
            raise ToolError(f"{spell(given)} is a file, not a folder; use read_file to read it")
        if not stat.S_ISDIR(info.st_mode):
            raise ToolError(f"{spell(given)} is not a folder (a device, socket or pipe); list its parent instead")
        return spot.open(_DIR_READ), spot.rel


_DIR_READ = os.O_RDONLY | os.O_DIRECTORY | os.O_NONBLOCK
Entry = tuple[str, str, str]  # name, kind ("link", "dir", "other" or "error"), link target or error text


def _entries(top_fd: int, sub: str) -> list[Entry]:
    """The visible entries of folder `sub` below the listed one, sorted; opened without following symlinks."""
    try:
        fd = open_real(top_fd, sub, _DIR_READ) if sub else os.dup(top_fd)
        try:
            found: list[Entry] = []
            with os.scandir(fd) as scan:
                for entry in scan:
                    if not _visible(entry.name):
                        continue
                    if entry.is_symlink():
                        found.append((entry.name, "link", _link_target(entry.name, fd)))
                    else:
                        found.append((entry.name, "dir" if entry.is_dir(follow_symlinks=False) else "other", ""))
        finally:
            os.close(fd)
    except OSError as exc:
        return [("", "error", exc.strerror or str(exc))]
    return sorted(found, key=lambda entry: entry[0])


def _link_target(name: str, dir_fd: int) -> str:
    """Where a symlink points, as text ('?' if it vanished meanwhile)."""
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError:
        return "?"


def _walk(top_fd: int, depth: int, listing: _Listing) -> None:
    """Depth-first, as a tree prints: an entry, then (for a folder above `depth`) its own entries."""
    stack: list[tuple[list[Entry], int, str, int]] = [(_entries(top_fd, ""), 0, "", 1)]
    while stack:
        entries, index, sub, level = stack[-1]
        if index == len(entries):
            stack.pop()
            continue
        stack[-1] = (entries, index + 1, sub, level)
        name, kind, extra = entries[index]
        indent = "  " * level
        if kind == "error":
            listing.add(f"{indent}[cannot list: {extra}]")
        elif kind == "link":
            listing.add(f"{indent}{name} -> {extra}")
        elif kind == "dir":
            listing.add(f"{indent}{name}/")
            if level < depth:
                child = f"{sub}/{name}" if sub else name
                stack.append((_entries(top_fd, child), 0, child, level + 1))
        else:
            listing.add(f"{indent}{name}")


def _visible(name: str) -> bool:
    return not name.startswith(".") and name not in SKIPPED_NAMES
