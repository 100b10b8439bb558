"""grep: regex search over the workspace, with ripgrep when it is there and a Python fallback when not.

Both back ends give byte-identical observations on the same tree, which speculation relies on:
matches are sorted by path (folder by folder, like ripgrep's `--sort path`) then line; hidden entries
and symlinks are skipped; .gitignore rules apply inside git repositories (asked of `git check-ignore`
in the fallback); a file with a NUL byte in its first 64 KiB is binary and skipped, and a later NUL
ends the search of that file, as ripgrep does. The two regex dialects (Rust's and Python's) agree on
ordinary patterns; exotic syntax can differ.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox import Workspace, run_process
from tools.base import MAX_OUTPUT_CHARS, Effect, Observation, ToolError, observe
from tools.globs import GlobFilter
from tools.textfile import split_lines

MAX_MATCHES = 200
MAX_MATCH_LINE_CHARS = 300
GREP_TIMEOUT = 120.0
BINARY_PREFIX_BYTES = 64 * 1024  # ripgrep's first read buffer: a NUL in it skips the whole file
_RG_MAX_BYTES = 16 * 1024 * 1024
_RG_FLAGS = ("--no-config", "--sort", "path", "--no-heading", "--with-filename", "--line-number",
             "--color", "never", "--null", "--no-ignore-dot", "--no-messages", "--encoding", "none")


@dataclass(frozen=True)
class Match:
    path: str  # workspace-relative
    line: int
    text: str


@dataclass(frozen=True)
class SearchResult:
    matches: list[Match]  # the first ones in output order, at most the tool's max_matches
    total: int  # all matching lines


def sort_key(path: str) -> tuple[str, ...]:
    """Order paths folder by folder, as ripgrep's --sort path does (`a/b` before `a.txt`)."""
    return tuple(path.split("/"))


def find_rg() -> str | None:
    """ripgrep on PATH, or the one installed next to this Python (the `ripgrep` wheel puts it there)."""
    found = shutil.which("rg")
    if found:
        return found
    beside = Path(sys.executable).parent / "rg"
    return str(beside) if beside.is_file() and os.access(beside, os.X_OK) else None


class Grep:
    """Search file contents with a regular expression; ripgrep if available, else pure Python."""

    name = "grep"
    description = (
        "Search file contents with a regular expression; prints path:line:text for each matching line, "
        "sorted by path then line. Skips hidden, binary and .gitignored files. Narrow it with path "
        "(a folder or file) and glob (e.g. '*.py', '!tests/**')."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "Regular expression (ripgrep/Rust syntax)."},
            "path": {"type": "string", "description": "Folder or file to search (default: the workspace)."},
            "glob": {"type": "string", "description": "Only files matching this glob, e.g. '*.py'."},
        },
        "required": ["pattern"],
        "additionalProperties": False,
    }
    effect = Effect.PURE

    def __init__(self, *, use_rg: bool = True, rg_path: str | None = None, max_matches: int = MAX_MATCHES) -> None:
        self.rg_path = (rg_path or find_rg()) if use_rg else None
        self.max_matches = max_matches

    async def run(self, args: dict[str, Any], workspace: Workspace) -> Observation:
        pattern: str = args["pattern"]
        if not pattern:
            raise ToolError("pattern is empty; pass a regular expression such as 'def main' or 'TODO'")
        real = workspace.resolve(args.get("path") or ".")
        rel = workspace.relative(real)
        if not real.exists():
            raise ToolError(f"path not found: {args.get('path')}; use list_files to look around")
        if not (real.is_file() or real.is_dir()):
            raise ToolError(f"{rel} is not a regular file or folder; grep cannot search it")
        if real.is_file() and await asyncio.to_thread(_has_nul, real):
            return observe(f"{rel} is a binary file; grep searches text files only.", exit_code=1,
                           path=rel, matches=0)
        glob = args.get("glob") or None
        if self.rg_path:
            result = await _search_rg(self.rg_path, pattern, rel, glob, workspace.root, self.max_matches)
        else:
            result = await _search_python(pattern, rel, glob, workspace.root, self.max_matches)
        return _report(result, pattern, rel, glob)


def _report(result: SearchResult, pattern: str, rel: str, glob: str | None) -> Observation:
    where = ("the workspace" if rel == "." else rel) + (f" (glob {glob!r})" if glob else "")
    if not result.total:
        return observe(f"No matches for {pattern!r} in {where}.", exit_code=1, path=rel, matches=0)
    lines: list[str] = []
    budget = MAX_OUTPUT_CHARS - 300
    for match in result.matches:
        line = f"{match.path}:{match.line}:{_cut(match.text)}"
        budget -= len(line) + 1
        if budget < 0:
            break
        lines.append(line)
    if result.total > len(lines):
        lines.append(f"[showing the first {len(lines)} of {result.total} matching lines; "
                     "narrow the pattern, path or glob to see the rest]")
    return observe("\n".join(lines), exit_code=0, path=rel, matches=result.total)


def _cut(text: str) -> str:
    text = text.removesuffix("\r")
    if len(text) <= MAX_MATCH_LINE_CHARS:
        return text
    return f"{text[:MAX_MATCH_LINE_CHARS]} [... {len(text) - MAX_MATCH_LINE_CHARS} more characters]"


def _has_nul(path: Path) -> bool:
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            if b"\0" in chunk:
                return True
    return False


# --- ripgrep ----------------------------------------------------------------------------------------

async def _search_rg(rg: str, pattern: str, rel: str, glob: str | None, root: Path, limit: int) -> SearchResult:
    argv = [rg, *_RG_FLAGS, "-e", pattern, *(["-g", glob] if glob else []), "--", rel]
    result = await run_process(argv, root, timeout=GREP_TIMEOUT, max_bytes=_RG_MAX_BYTES)
    if result.timed_out:
        raise ToolError(f"grep timed out after {GREP_TIMEOUT:g} s; narrow the path or glob")
    output = result.output
    if result.dropped_bytes:  # keep the head only, which is sorted, up to its last whole line
        output = output[:_RG_MAX_BYTES // 2]
        output = output[:output.rfind(b"\n") + 1]
    matches = [match for line in output.split(b"\n") if (match := _parse_rg_line(line))]
    if result.exit_code == 2 and not matches:
        raise ToolError(_rg_error(result.text, pattern))
    matches.sort(key=lambda m: (sort_key(m.path), m.line))
    total = await _rg_count(argv, root) if result.dropped_bytes else len(matches)
    return SearchResult(matches[:limit], total)


def _parse_rg_line(line: bytes) -> Match | None:
    """`path NUL line:text`; anything else (ripgrep's binary-file warnings) is not a match."""
    path, sep, rest = line.partition(b"\0")
    number, colon, text = rest.partition(b":")
    if not sep or not colon or not number.isdigit():
        return None
    shown = path.decode("utf-8", errors="replace").removeprefix("./")
    return Match(shown, int(number), text.decode("utf-8", errors="replace"))


async def _rg_count(argv: list[str], root: Path) -> int:
    """The number of matching lines when the listing itself was too long to keep."""
    result = await run_process([argv[0], "--count", *argv[1:]], root, timeout=GREP_TIMEOUT)
    total = 0
    for line in result.output.split(b"\n"):
        _, sep, count = line.rpartition(b"\0")
        if sep and count.isdigit():
            total += int(count)
    return total


def _rg_error(text: str, pattern: str) -> str:
    message = "\n".join(line.removeprefix("rg: ") for line in text.strip().splitlines())
    if "regex" in message or "error:" in message:
        return (f"invalid regex {pattern!r}:\n{message}\nUse ripgrep (Rust) regex syntax; escape special "
                "characters such as ( [ . * + ? with a backslash to match them literally")
    return f"grep failed: {message}"


# --- Python fallback --------------------------------------------------------------------------------

async def _search_python(pattern: str, rel: str, glob: str | None, root: Path, limit: int) -> SearchResult:
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise ToolError(f"invalid regex {pattern!r}: {exc}; escape special characters such as ( [ . * + ? "
                        "with a backslash to match them literally") from None
    if (root / rel).is_file():
        files = [rel]  # a file named explicitly is searched whatever the glob and ignore rules say
    else:
        files = await candidate_files(root, rel, GlobFilter.parse(glob) if glob else None)
    return await asyncio.to_thread(_scan_files, root, files, regex, limit)


async def candidate_files(root: Path, base: str, glob: GlobFilter | None) -> list[str]:
    """The files ripgrep would search under `base`, sorted, found folder level by folder level."""
    files: list[str] = []
    level, use_git = [base], True
    while level:
        entries = await asyncio.to_thread(_scan_level, root, level)
        undecided: list[tuple[str, bool]] = []
        next_level: list[str] = []
        for rel, is_dir in entries:
            verdict = glob.verdict(rel, is_dir) if glob else None
            if verdict is None and not rel.rsplit("/", 1)[-1].startswith("."):
                undecided.append((rel, is_dir))
            elif verdict:
                (next_level if is_dir else files).append(rel)
        ignored: set[str] = set()
        if use_git and undecided:
            ignored, use_git = await _git_ignored(root, [rel for rel, _ in undecided])
        for rel, is_dir in undecided:
            if rel not in ignored:
                (next_level if is_dir else files).append(rel)
        level = next_level
    return sorted(files, key=sort_key)


def _scan_level(root: Path, folders: list[str]) -> list[tuple[str, bool]]:
    """(relative path, is folder) of each regular file and folder in `folders`; symlinks are skipped."""
    entries = []
    for folder in folders:
        prefix = "" if folder == "." else folder + "/"
        try:
            with os.scandir(root / folder) as scan:
                for entry in scan:
                    if entry.is_symlink():
                        continue
                    if entry.is_dir() or entry.is_file():
                        entries.append((prefix + entry.name, entry.is_dir()))
        except OSError:
            continue
    return entries


async def _git_ignored(root: Path, paths: list[str]) -> tuple[set[str], bool]:
    """Which paths .gitignore rules exclude, and whether git answered (False outside a repository)."""
    argv = ["git", "check-ignore", "-z", "--stdin", "--no-index"]
    stdin = b"".join(os.fsencode(path) + b"\0" for path in paths)
    try:
        result = await run_process(argv, root, stdin=stdin, timeout=GREP_TIMEOUT, max_bytes=1 << 30)
    except FileNotFoundError:
        return set(), False
    if result.exit_code not in (0, 1):
        return set(), False
    return {os.fsdecode(item) for item in result.output.split(b"\0") if item}, True


def _scan_files(root: Path, files: list[str], regex: re.Pattern[str], limit: int) -> SearchResult:
    matches: list[Match] = []
    total = 0
    for rel in files:
        try:
            data = (root / rel).read_bytes()
        except OSError:
            continue
        nul = data.find(b"\0")
        if nul != -1:
            if nul < BINARY_PREFIX_BYTES:
                continue
            data = data[:data.rfind(b"\n", 0, nul) + 1]
        for number, line in enumerate(split_lines(data.decode("utf-8", errors="replace")), start=1):
            if regex.search(line):
                total += 1
                if len(matches) < limit:
                    matches.append(Match(rel, number, line))
    return SearchResult(matches, total)
