"""grep: regex search over the workspace, with ripgrep when it is there and a Python fallback when not.

Both back ends give byte-identical observations on the same tree, which speculation relies on:
matches are sorted by path (folder by folder, like ripgrep's `--sort path`) then line; hidden entries
and symlinks are skipped; .gitignore rules apply inside git repositories (asked of `git check-ignore`
in the fallback); a file with a NUL byte in its first 64 KiB is binary and skipped, and a later NUL
ends the search of that file, as ripgrep does. The two regex dialects (Rust's and Python's) agree on
ordinary patterns; exotic syntax can differ.

Both are bounded: ripgrep runs with a timeout, and the fallback matches with the `regex` package's
`timeout=` (releasing the GIL while it matches), so a catastrophic pattern such as `(a|aa)+$` ends in an
error asking for a simpler one instead of a hang. The fallback opens every folder and file without
following symlinks (`sandbox.beneath`), so a folder swapped for a symlink mid-search is skipped.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import regex

from sandbox import ProcessResult, WorkspaceView, landlock, run_process
from sandbox.beneath import locate, open_real
from sandbox.process import DEFAULT_MAX_BYTES
from tools.base import DEFAULT_TOOL_TIMEOUT, MAX_OUTPUT_CHARS, Effect, Observation, ToolError, observe
from tools.globs import GlobFilter
from tools.textfile import READ_FLAGS, spell, split_lines

MAX_MATCHES = 200
MAX_MATCH_LINE_CHARS = 300
GREP_TIMEOUT = DEFAULT_TOOL_TIMEOUT  # the default for one whole call, subprocesses and matching included
BINARY_PREFIX_BYTES = 64 * 1024  # ripgrep's first read buffer: a NUL in it skips the whole file
_RG_MAX_BYTES = 16 * 1024 * 1024
_IGNORE_FILES = (".gitignore", ".ignore", ".rgignore", ".git", ".git/info/exclude")  # read in parent folders
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

    timeout_grace = 5.0  # grep stops itself at `timeout` with its own message; run_tool waits a little longer

    def __init__(self, *, use_rg: bool = True, rg_path: str | None = None, max_matches: int = MAX_MATCHES,
                 timeout: float | None = None) -> None:
        self.rg_path = (rg_path or find_rg()) if use_rg else None
        self.max_matches = max_matches
        self._timeout = timeout

    @property
    def timeout(self) -> float:
        """Seconds one call may take (GREP_TIMEOUT, read at call time, unless given)."""
        return self._timeout if self._timeout is not None else GREP_TIMEOUT

    async def run(self, args: dict[str, Any], workspace: WorkspaceView) -> Observation:
        pattern: str = args["pattern"]
        if not pattern:
            raise ToolError("pattern is empty; pass a regular expression such as 'def main' or 'TODO'")
        glob = args.get("glob") or None
        _check_text("pattern", pattern)
        if glob is not None:
            _check_text("glob", glob)
        deadline = Deadline(self.timeout)
        target = await asyncio.to_thread(_target, workspace, args.get("path"))
        try:
            if target.binary:
                return observe(f"{target.rel} is a binary file; grep searches text files only.", exit_code=1,
                               path=target.rel, matches=0)
            if self.rg_path:
                result = await _search_rg(self.rg_path, pattern, target, glob, workspace.root, self.max_matches,
                                          deadline)
            else:
                result = await _search_python(pattern, target, glob, workspace.root, self.max_matches, deadline)
        finally:
            target.close()
        return _report(result, pattern, target.rel, glob)


class Deadline:
    """The time one grep call may still take; `left()` raises the call's timeout error once it is over."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        """Seconds still allowed; the timeout error once none are."""
        remaining = self.end - time.monotonic()
        if remaining <= 0:
            raise self.error()
        return remaining

    def error(self) -> ToolError:
        """The error a call past its deadline ends with."""
        return ToolError(f"grep took longer than {self.seconds:g} s and was stopped; narrow the path or glob, "
                         "or simplify the pattern")


def _check_text(what: str, text: str) -> None:
    """Refuse a pattern or glob that cannot be passed on: a NUL byte or a lone surrogate."""
    if "\0" in text:
        raise ToolError(f"{what} {text!r} contains a NUL byte; write it as \\x00 in a pattern, or leave it out")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ToolError(f"{what} {text!r} contains a lone surrogate (an unpaired \\ud800-\\udfff escape), which "
                        "no file can contain; remove it") from None


@dataclass
class Target:
    """What one call searches: a folder, or a regular file held open (so it cannot be swapped meanwhile)."""

    rel: str  # workspace-relative real spelling
    fd: int | None = None  # the file's descriptor; None for a folder
    binary: bool = False

    def close(self) -> None:
        """Release the held file."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def data(self) -> bytes:
        """The held file's bytes, from its start."""
        assert self.fd is not None
        chunks, offset = [], 0
        while chunk := os.pread(self.fd, 1 << 20, offset):
            chunks.append(chunk)
            offset += len(chunk)
        return b"".join(chunks)


def _target(workspace: WorkspaceView, path: str | None) -> Target:
    """What to search, looked up without leaving the workspace; a named file is opened and held."""
    with locate(workspace.root, path or ".") as spot:
        try:
            info = os.stat(spot.name or ".", dir_fd=spot.dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            raise ToolError(f"path not found: {spell(path)}; use list_files to look around") from None
        if stat.S_ISDIR(info.st_mode):
            return Target(spot.rel)
        if not stat.S_ISREG(info.st_mode):
            raise ToolError(f"{spell(path)} is not a regular file or folder; grep cannot search it")
        fd = spot.open(READ_FLAGS)
        target = Target(spot.rel, fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ToolError(f"{spell(path)} is not a regular file or folder; grep cannot search it")
        target.binary = _has_nul(fd)
    except BaseException:
        target.close()
        raise
    return target


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


def _has_nul(fd: int) -> bool:
    while chunk := os.read(fd, 1 << 20):
        if b"\0" in chunk:
            return True
    return False


# --- ripgrep ----------------------------------------------------------------------------------------

async def _search_rg(rg: str, pattern: str, target: Target, glob: str | None, root: Path, limit: int,
                     deadline: Deadline) -> SearchResult:
    # A named file is searched through the descriptor already checked, never by its name again.
    """The search through ripgrep, confined to the workspace where the kernel allows it."""
    held = (target.fd,) if target.fd is not None and os.path.isdir("/proc/self/fd") else ()
    searched = f"/proc/self/fd/{held[0]}" if held else target.rel
    argv = [rg, *_RG_FLAGS, "-e", pattern, *(["-g", glob] if glob else []), "--", searched]
    result = await _run_rg(argv, root, deadline, _RG_MAX_BYTES, held)
    if result.timed_out:
        raise deadline.error()
    output = result.output
    if result.dropped_bytes:  # keep the head only, which is sorted, up to its last whole line
        output = output[:_RG_MAX_BYTES // 2]
        output = output[:output.rfind(b"\n") + 1]
    matches = [match for line in output.split(b"\n") if (match := _parse_rg_line(line))]
    if held:
        matches = [Match(target.rel, match.line, match.text) for match in matches]
    if result.exit_code == 2 and not matches:
        raise ToolError(_rg_error(result.text, pattern))
    matches.sort(key=lambda m: (sort_key(m.path), m.line))
    total = await _rg_count(argv, root, deadline, held) if result.dropped_bytes else len(matches)
    return SearchResult(matches[:limit], total)


async def _run_rg(argv: list[str], root: Path, deadline: Deadline, max_bytes: int,
                  held: tuple[int, ...]) -> ProcessResult:
    """Run ripgrep so that it can read nothing outside the workspace, however the tree changes while it
    walks it (Landlock); where the kernel cannot confine it, as a plain subprocess."""
    if landlock.available():
        rules = await asyncio.to_thread(_rg_rules, argv[0], root)  # the first call asks ldd: not on the loop
        return await landlock.run_readonly(argv, root, rules, timeout=deadline.left(), max_bytes=max_bytes,
                                           pass_fds=held)
    return await run_process(argv, root, timeout=deadline.left(), max_bytes=max_bytes, pass_fds=held)


def _rg_rules(rg: str, root: Path) -> landlock.ReadRules:
    """The workspace, ripgrep itself, and the ignore files outside the workspace that it consults."""
    outside = [parent / name for parent in root.parents for name in _IGNORE_FILES]
    home = Path.home()
    config = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config")
    outside += [home / ".gitconfig", config / "git" / "config", config / "git" / "ignore"]
    return landlock.ReadRules(trees=(root,), files=(*landlock.program_files(rg), *outside))


def _parse_rg_line(line: bytes) -> Match | None:
    """`path NUL line:text`; anything else (ripgrep's binary-file warnings) is not a match."""
    path, sep, rest = line.partition(b"\0")
    number, colon, text = rest.partition(b":")
    if not sep or not colon or not number.isdigit():
        return None
    shown = path.decode("utf-8", errors="replace").removeprefix("./")
    return Match(shown, int(number), text.decode("utf-8", errors="replace"))


async def _rg_count(argv: list[str], root: Path, deadline: Deadline, held: tuple[int, ...]) -> int:
    """The number of matching lines when the listing itself was too long to keep."""
    result = await _run_rg([argv[0], "--count", *argv[1:]], root, deadline, DEFAULT_MAX_BYTES, held)
    if result.timed_out:
        raise deadline.error()
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

async def _search_python(pattern: str, target: Target, glob: str | None, root: Path, limit: int,
                         deadline: Deadline) -> SearchResult:
    """The fallback search: Python's walk and the `regex` package, bounded by the deadline."""
    try:
        compiled = regex.compile(pattern)
    except (regex.error, RecursionError, OverflowError, ValueError) as exc:
        raise ToolError(f"invalid regex {pattern!r}: {exc}; escape special characters such as ( [ . * + ? "
                        "with a backslash to match them literally") from None
    try:
        globs = GlobFilter.parse(glob) if glob else None
    except (regex.error, RecursionError, OverflowError, ValueError) as exc:
        raise ToolError(f"invalid glob {glob!r}: {exc}; use *, ?, ** and {{a,b}} as in ripgrep's -g") from None
    if target.fd is not None:  # a file named explicitly is searched whatever the glob and ignore rules say
        found = _Found(limit)
        await asyncio.to_thread(_scan_data, target.rel, target.data(), compiled, found, deadline)
        return SearchResult(found.matches, found.total)
    with RootFd(root) as root_fd:
        files = await candidate_files(root, target.rel, globs, root_fd=root_fd, deadline=deadline)
        return await asyncio.to_thread(_scan_files, root_fd, files, compiled, limit, deadline)


class RootFd:
    """An O_PATH descriptor of the workspace root for one search (a context manager)."""

    def __init__(self, root: Path) -> None:
        self.fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)

    def __enter__(self) -> int:
        return self.fd

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)


async def candidate_files(root: Path, base: str, glob: GlobFilter | None, *, root_fd: int | None = None,
                          deadline: Deadline | None = None) -> list[str]:
    """The files ripgrep would search under `base`, sorted, found folder level by folder level."""
    deadline = deadline or Deadline(GREP_TIMEOUT)
    if root_fd is None:
        with RootFd(root) as fd:
            return await candidate_files(root, base, glob, root_fd=fd, deadline=deadline)
    files: list[str] = []
    level, use_git = [base], True
    while level:
        entries = await asyncio.to_thread(_scan_level, root_fd, level)
        undecided: list[tuple[str, bool]] = []
        next_level: list[str] = []
        for rel, is_dir in entries:
            verdict = glob.verdict(rel, is_dir, timeout=deadline.left()) if glob else None
            if verdict is None and not rel.rsplit("/", 1)[-1].startswith("."):
                undecided.append((rel, is_dir))
            elif verdict:
                (next_level if is_dir else files).append(rel)
        ignored: set[str] = set()
        if use_git and undecided:
            ignored, use_git = await _git_ignored(root, [rel for rel, _ in undecided], deadline)
        for rel, is_dir in undecided:
            if rel not in ignored:
                (next_level if is_dir else files).append(rel)
        level = next_level
    return sorted(files, key=sort_key)


def _scan_level(root_fd: int, folders: list[str]) -> list[tuple[str, bool]]:
    """(relative path, is folder) of each regular file and folder in `folders`; symlinks are skipped.

    Each folder is opened without following any symlink: one swapped in since it was listed is skipped."""
    entries = []
    for folder in folders:
        prefix = "" if folder == "." else folder + "/"
        try:
            fd = open_real(root_fd, folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            with os.scandir(fd) as scan:
                for entry in scan:
                    if entry.is_symlink():
                        continue
                    is_dir = entry.is_dir(follow_symlinks=False)
                    if is_dir or entry.is_file(follow_symlinks=False):
                        entries.append((prefix + entry.name, is_dir))
        except OSError:
            continue
        finally:
            os.close(fd)
    return entries


async def _git_ignored(root: Path, paths: list[str], deadline: Deadline) -> tuple[set[str], bool]:
    """Which paths .gitignore rules exclude, and whether git answered (False outside a repository)."""
    argv = ["git", "check-ignore", "-z", "--stdin", "--no-index"]
    stdin = b"".join(os.fsencode(path) + b"\0" for path in paths)
    try:
        result = await run_process(argv, root, stdin=stdin, timeout=deadline.left(), max_bytes=1 << 30)
    except FileNotFoundError:
        return set(), False
    if result.timed_out:
        raise deadline.error()
    if result.exit_code not in (0, 1):
        return set(), False
    return {os.fsdecode(item) for item in result.output.split(b"\0") if item}, True


@dataclass
class _Found:
    """Matches kept (the first `limit`) and all matching lines counted."""

    limit: int
    matches: list[Match] = field(default_factory=list)
    total: int = 0


def _scan_files(root_fd: int, files: list[str], compiled: Any, limit: int, deadline: Deadline) -> SearchResult:
    """Match every listed file, each opened without following symlinks."""
    found = _Found(limit)
    for rel in files:
        data = _read_regular(root_fd, rel)
        if data is not None:
            _scan_data(rel, data, compiled, found, deadline)
    return SearchResult(found.matches, found.total)


def _scan_data(rel: str, data: bytes, compiled: Any, found: _Found, deadline: Deadline) -> None:
    """Match one file's lines as ripgrep would: binary skipped, a late NUL ends the search of it."""
    nul = data.find(b"\0")
    if nul != -1:
        if nul < BINARY_PREFIX_BYTES:
            return
        data = data[:data.rfind(b"\n", 0, nul) + 1]
    text = data.decode("utf-8", errors="replace")
    if _whole_text_implied(compiled.pattern) and not _matches(compiled, text, deadline):
        return  # no line can match: one search of the whole file said so
    for number, line in enumerate(split_lines(text), start=1):
        if _matches(compiled, line, deadline):
            found.total += 1
            if len(found.matches) < found.limit:
                found.matches.append(Match(rel, number, line))


_CONTEXT_SYNTAX = ("^", "$", "\\A", "\\Z", "\\z", "\\G", "(?=", "(?!", "(?<")


def _whole_text_implied(pattern: str) -> bool:
    """Whether a match in a line implies a match in the whole file: true for a pattern that looks at the
    characters it matches only (no anchors, no lookaround; a word boundary sees a newline as a line end)."""
    return not any(syntax in pattern for syntax in _CONTEXT_SYNTAX)


def _read_regular(root_fd: int, rel: str) -> bytes | None:
    """A listed file's bytes, opened without following symlinks; None if it is gone or no longer regular."""
    try:
        fd = open_real(root_fd, rel, READ_FLAGS)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _matches(compiled: Any, line: str, deadline: Deadline) -> bool:
    """Whether the pattern matches the line, within the call's deadline (the GIL is free meanwhile)."""
    try:
        return compiled.search(line, timeout=deadline.left(), concurrent=True) is not None
    except TimeoutError:
        raise ToolError(f"the pattern {compiled.pattern!r} took too long to match (over {deadline.seconds:g} s) and "
                        "was stopped; simplify it: nested repetition such as (a+)+ or (a|aa)* backtracks "
                        "without end on long lines") from None
