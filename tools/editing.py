"""The tools that change files: edit_file (exact, unique replacement) and write_file (whole file)."""

from __future__ import annotations

import asyncio
import difflib
import os
import re
import stat
from typing import Any

from sandbox import WorkspaceView
from sandbox.beneath import BadPath, Spot, WorkspaceEscape, locate
from tools.base import Effect, Observation, ToolError, observe
from tools.placing import Changed, current_umask, place
from tools.textfile import TextFile, digest, locate_text, number_lines, spell, split_lines

CONTEXT_LINES = 3  # lines shown around an edit
MAX_LISTED_OCCURRENCES = 20
_MAX_LINES_FOR_FUZZY_HINT = 5000
_MAX_CHARS_FOR_FUZZY_HINT = 1000  # lines longer than this are not compared for the "closest line" hint
_LINE_NUMBER_PREFIX = re.compile(r"^\s*\d+\t", re.MULTILINE)


class EditFile:
    """Replace one exact, unique occurrence of `old` with `new`; every other byte stays as it was."""

    name = "edit_file"
    description = (
        "Replace an exact piece of text in a file. `old` must occur exactly once (copy it from read_file "
        "without the line numbers, with enough surrounding lines to be unique); `new` replaces it."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File path relative to the workspace root."},
            "old": {"type": "string", "description": "The exact text to replace; must occur exactly once."},
            "new": {"type": "string", "description": "The replacement text (may be empty to delete)."},
        },
        "required": ["path", "old", "new"],
        "additionalProperties": False,
    }
    effect = Effect.MUTATING

    def __init__(self, timeout: float | None = None) -> None:
        self.timeout = timeout  # seconds run_tool lets one call take (None: DEFAULT_TOOL_TIMEOUT)

    async def run(self, args: dict[str, Any], workspace: WorkspaceView) -> Observation:
        _check_args(args["old"], args["new"])
        return await asyncio.to_thread(self._edit, args["path"], args["old"], args["new"], workspace)

    def preview(self, args: dict[str, Any], workspace: WorkspaceView) -> tuple[str, bytes, int]:
        """What `run` would write, without writing: the file's workspace-relative path, its new bytes and mode.
        Raises ToolError where `run` would fail (blocking: reads the file)."""
        _check_args(args["old"], args["new"])
        file, spot = locate_text(workspace, args["path"])
        with spot:
            encoded, *_ = _replaced(file, args["path"], args["old"], args["new"], workspace)
        return file.rel, encoded, stat.S_IMODE(file.stat.st_mode) if file.stat is not None else 0o666 & ~current_umask()

    def _edit(self, path: str, old: str, new: str, workspace: WorkspaceView) -> Observation:
        """Read, replace and place the file (blocking: runs in a worker thread)."""
        file, spot = locate_text(workspace, path)
        with spot:
            encoded, first, old, new = _replaced(file, path, old, new, workspace)
            place(spot, encoded, before=file.stat, spelling=spell(path))
        return _edit_report(file.rel, encoded, first, _last_line(first, old), _last_line(first, new) if new else 0)


def _check_args(old: str, new: str) -> None:
    """Refuse an edit that finds nothing or changes nothing."""
    if old == "":
        raise ToolError("old is empty, so there is nothing to find; put the lines to change in old "
                        "(to create or replace a whole file use write_file)")
    if old == new:
        raise ToolError("old and new are identical, so the edit would change nothing; put the new text in new")


def _replaced(file: TextFile, path: str, old: str, new: str, workspace: WorkspaceView) -> tuple[bytes, int, str, str]:
    """The file's bytes with `old` replaced by `new`, the first line changed, and old and new as matched (CRLF)."""
    spelling = spell(path)
    if file.binary:
        raise ToolError(f"{spelling} is a binary file; edit_file edits text files only")
    _check_seen(workspace, file, spelling)
    # surrogateescape keeps undecodable bytes as they are, so the rest of the file is preserved exactly.
    content = file.data.decode("utf-8", errors="surrogateescape")
    old, new, positions = _locate(content, old, new, crlf=file.crlf)
    if not positions:
        raise ToolError(f"old was not found in {spelling}. {_not_found_hint(content, old)}")
    if len(positions) > 1:
        raise ToolError(_ambiguous(content, positions, spelling))
    start = positions[0]
    updated = content[:start] + new + content[start + len(old):]
    try:
        encoded = updated.encode("utf-8", errors="surrogateescape")
    except UnicodeEncodeError as exc:
        raise ToolError(f"new contains characters that cannot be written as UTF-8 ({exc.reason})") from None
    return encoded, content.count("\n", 0, start) + 1, old, new


def _check_seen(workspace: WorkspaceView, file: TextFile, spelling: str) -> None:
    """Refuse to edit a file whose content is not what the model last saw of it (a file never seen is fine)."""
    seen = getattr(workspace, "seen", None)
    last = seen(file.rel) if callable(seen) else None
    if last is not None and last != file.digest:
        raise ToolError(f"{spelling} changed since you last read it (by a command or outside Tao); "
                        f"read_file it again before editing")


def _locate(content: str, old: str, new: str, *, crlf: bool) -> tuple[str, str, list[int]]:
    """Where `old` occurs (overlaps count); retry with CRLF endings when the file uses them."""
    positions = _find_all(content, old)
    if not positions and crlf and "\n" in old and "\r\n" not in old:
        crlf_old = old.replace("\n", "\r\n")
        positions = _find_all(content, crlf_old)
        if positions:
            return crlf_old, new.replace("\r\n", "\n").replace("\n", "\r\n"), positions
    return old, new, positions


def _find_all(content: str, old: str) -> list[int]:
    positions = []
    index = content.find(old)
    while index != -1:
        positions.append(index)
        index = content.find(old, index + 1)
    return positions


def _ambiguous(content: str, positions: list[int], rel: str) -> str:
    lines = [content.count("\n", 0, p) + 1 for p in positions[:MAX_LISTED_OCCURRENCES]]
    more = f" and {len(positions) - len(lines)} more" if len(positions) > len(lines) else ""
    return (f"old occurs {len(positions)} times in {rel} (starting at lines {', '.join(map(str, lines))}{more}); "
            "include more surrounding lines in old so that it matches exactly once")


def _not_found_hint(content: str, old: str) -> str:
    """Say why an exact match may have failed: line-number prefixes, whitespace, or the closest line."""
    if _LINE_NUMBER_PREFIX.search(old) and not _LINE_NUMBER_PREFIX.search(content):
        return "old seems to include read_file's line-number prefixes; remove them and keep only the file's text."
    if " ".join(old.split()) in " ".join(content.split()):
        hint = ("The text is there if whitespace is ignored: indentation, tabs, trailing spaces or line breaks "
                "differ. Copy old exactly from read_file output (without the line numbers).")
    else:
        hint = "Maybe whitespace or indentation differs, or the file changed; read_file it again and copy old exactly."
    return f"{hint}{_closest_line(content, old)}"


def _closest_line(content: str, old: str) -> str:
    """Where the first line of `old` appears (ignoring surrounding whitespace) or what resembles it."""
    first = next((line.strip() for line in old.split("\n") if line.strip()), "")
    lines = split_lines(content)
    if not first or len(lines) > _MAX_LINES_FOR_FUZZY_HINT:
        return ""
    stripped = [line.strip() for line in lines]
    if first in stripped:
        number = stripped.index(first) + 1
        label = "Its first line appears at line"
    else:
        if len(first) > _MAX_CHARS_FOR_FUZZY_HINT:
            return ""  # comparing long lines costs their lengths multiplied: no hint is better than a stall
        short = [line if len(line) <= _MAX_CHARS_FOR_FUZZY_HINT else "" for line in stripped]
        close = difflib.get_close_matches(first, short, n=1, cutoff=0.6)
        if not close:
            return ""
        number = stripped.index(close[0]) + 1
        label = "The closest line to its first line is line"
    shown = lines[number - 1].encode("utf-8", "surrogateescape").decode("utf-8", "replace").rstrip("\r")
    return f" {label} {number}: {shown!r}."


def _last_line(first: int, text: str) -> int:
    """The line on which `text`, starting on line `first`, ends (a final newline ends that line)."""
    return first + text.removesuffix("\n").count("\n")


def _edit_report(rel: str, encoded: bytes, first: int, old_last: int, new_last: int) -> Observation:
    """Say which lines changed and show them numbered, with a few lines of context."""
    lines = split_lines(encoded.decode("utf-8", errors="replace"))
    seen = digest(encoded)
    if new_last:
        done = f"replaced lines {first}-{old_last} with lines {first}-{new_last}"
    else:
        done = f"deleted text from lines {first}-{old_last}"
    low = max(1, first - CONTEXT_LINES)
    high = min(len(lines), max(first, new_last) + CONTEXT_LINES)
    if low > high:
        return observe(f"Edited {rel}: {done}. The file is now empty.", path=rel, first_line=first, last_line=0,
                       digest=seen)
    snippet = number_lines(lines[low - 1:high], low)
    return observe(f"Edited {rel}: {done}. Lines {low}-{high} now read:\n{snippet}",
                   path=rel, first_line=first, last_line=new_last, digest=seen)


class WriteFile:
    """Write a whole file, creating its folders; says whether it created or overwrote the file."""

    name = "write_file"
    description = (
        "Write content to a file as UTF-8, creating missing folders; an existing file is overwritten "
        "entirely. Prefer edit_file for changing part of an existing file."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File path relative to the workspace root."},
            "content": {"type": "string", "description": "The complete new content of the file."},
        },
        "required": ["path", "content"],
        "additionalProperties": False,
    }
    effect = Effect.MUTATING

    def __init__(self, timeout: float | None = None) -> None:
        self.timeout = timeout  # seconds run_tool lets one call take (None: DEFAULT_TOOL_TIMEOUT)

    async def run(self, args: dict[str, Any], workspace: WorkspaceView) -> Observation:
        return await asyncio.to_thread(self._write, args["path"], args["content"], workspace)

    def preview(self, args: dict[str, Any], workspace: WorkspaceView) -> tuple[str, bytes, int]:
        """What `run` would write, without writing: the file's workspace-relative path, its bytes and mode (a new
        file's as a plain create gives it). Raises ToolError where `run` would refuse (blocking: stats the file)."""
        path, spelling = args["path"], spell(args["path"])
        data = _encoded(args["content"])
        spot = _existing_spot(workspace, path)
        if spot is None:
            return workspace.relative(workspace.resolve(path)), data, 0o666 & ~current_umask()
        with spot:
            before = _refuse_folder(spot, spelling)
            if before is not None and not stat.S_ISREG(before.st_mode):
                raise ToolError(f"{spelling} is not a regular file")
            return spot.rel, data, stat.S_IMODE(before.st_mode) if before is not None else 0o666 & ~current_umask()

    def _write(self, path: str, content: str, workspace: WorkspaceView) -> Observation:
        """Create the folders and place the file (blocking: runs in a worker thread)."""
        spelling = spell(path)
        spot = _existing_spot(workspace, path)
        if spot is not None:
            with spot:
                _refuse_folder(spot, spelling)
        data = _encoded(content)
        try:
            spot = locate(workspace.root, path, make_dirs=True)
        except (FileExistsError, NotADirectoryError):
            raise ToolError(f"cannot create the folders for {spelling}: part of the path is a file") from None
        with spot:
            before = _refuse_folder(spot, spelling)
            if before is not None and stat.S_ISLNK(before.st_mode):
                raise Changed(f"{spelling} changed while it was being written (it became a symlink), so nothing "
                              "was written; call write_file again")
            if before is not None and not stat.S_ISREG(before.st_mode):
                raise ToolError(f"{spelling} is not a regular file (a device, socket or pipe); write_file writes "
                                "regular files only")
            place(spot, data, before=before, spelling=spelling)
        lines = len(split_lines(content))
        verb = "Overwrote" if before is not None else "Created"
        return observe(f"{verb} {spot.rel} ({len(data)} bytes, {lines} line{'' if lines == 1 else 's'}).",
                       path=spot.rel, created=before is None, bytes=len(data), lines=lines, digest=digest(data))


def _encoded(content: str) -> bytes:
    """The content as the file's UTF-8 bytes; a ToolError for what UTF-8 cannot hold (lone surrogates)."""
    try:
        return content.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolError(f"content contains characters that cannot be written as UTF-8 ({exc.reason})") from None


def _existing_spot(workspace: WorkspaceView, path: str) -> Spot | None:
    """Where `path` leads if its folders exist (None if they do not yet); refusals for escapes and bad paths."""
    try:
        return locate(workspace.root, path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (WorkspaceEscape, BadPath) as exc:
        raise ToolError(str(exc)) from None


def _refuse_folder(spot: Spot, spelling: str) -> os.stat_result | None:
    """The entry's own status (None if absent); a ToolError if it is a folder."""
    try:
        info = os.stat(spot.name or ".", dir_fd=spot.dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if stat.S_ISDIR(info.st_mode):
        raise ToolError(f"{spelling} is a folder; pass the path of a file inside it")
    return info
