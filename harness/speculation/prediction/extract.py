"""Facts pulled out of text: file paths with line numbers (grep hits, tracebacks, prose), line ranges
named in reasoning, commands quoted in backticks, and the reasoning part of an answer.

These run once per observation or per streamed reasoning text, never once per decision.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field

from harness.calls.action import SHELL, norm_path

_EXT = r"(?:py|pyi|pyx|cfg|toml|ini|txt|rst|md|json|ya?ml|c|h|cc|cpp|hpp|js|jsx|ts|tsx|html|css|sh|go|rs|java|rb)"
_PATH = re.compile(r"(?<![\w.-])(/?(?:[\w.-]+/)*[\w-][\w.-]*\." + _EXT + r")(?![\w/])(?:[:,]\s?(?:line\s)?(\d+))?")
_TRACE = re.compile(r'File "([^"]+)", line (\d+)')
_GREP_LINE = re.compile(r"(?m)^(/?(?:[\w.-]+/)*[\w.-]+):(\d+)[:-]")
_LINES = re.compile(r"\blines?\s+(\d+)(?:\s*(?:-|–|to|through)\s*(\d+))?", re.IGNORECASE)
_BACKTICK = re.compile(r"`([^`\n]{2,200})`")
_DQUOTED = re.compile(r'(?<![\w=])"([A-Za-z_][\w.:-]{2,60})"(?![\w(])')  # "E015", "delete_cookie" in prose
_PLAIN_FOLDER = re.compile(r"(?<![\w./`-])((?:[\w-]+/)+[\w-]+)/?(?![\w./-])")  # tests/ordering, django/db/models/
_CALL_OPEN = "<tool_call>"
# A run of path characters this long names no file: a minified line, a data dump, a model's hostile answer.
# The path patterns would start anew after each of its slashes (quadratic work), so it is blanked first.
LONG_RUN = 300
_LONG_RUN = re.compile(rf"[\w./-]{{{LONG_RUN},}}")
_SYMBOL = re.compile(r"^(?:(?:def|class) )?[A-Za-z_][\w.]*(?:\(\))?$")
_FOLDER = re.compile(r"^/?[\w.-]+(?:/[\w.-]+)*/?$")
# Quoted words that name a tool or a Python constant rather than code to search for.
_NOT_SYMBOLS = frozenset({"sed", "grep", "cat", "nl", "head", "tail", "ls", "find", "python", "python3", "pytest",
                          "git", "echo", "rm", "cd", "bash", "sh", "awk", "diff", "pip", "tox", "perl", "patch", "None",
                          "True", "False", "self", "cls"})


def path_mentions(text: str, root: str = "", limit: int = 12) -> list[tuple[str, int | None]]:
    """Distinct (path, line) mentions; line is None when none is given.

    Traceback frames come first, the innermost (where the error is) first and frames outside the workspace
    after the others; then grep hits (`path:12:`) and paths anywhere in the text, in order of appearance.
    """
    found: list[tuple[str, int | None]] = []
    seen: set[tuple[str, int | None]] = set()
    diff = "diff --git " in text or "\n+++ b/" in text  # a diff names files as a/x and b/x
    text = blank_long_runs(text)

    def add(path: str, line: str | None) -> None:
        if path.startswith("<"):  # File "<string>": code with no file
            return
        if diff and path.startswith(("a/", "b/")):
            path = path[2:]
        key = (norm_path(path, root), int(line) if line else None)
        if key[0] and key not in seen and len(found) < limit:
            seen.add(key)
            found.append(key)

    frames = [(m.group(1), m.group(2)) for m in _TRACE.finditer(text)][::-1]
    inside = [f for f in frames if not f[0].startswith("/") or (root and f[0].startswith(root.rstrip("/") + "/"))]
    for path, line in inside + [f for f in frames if f not in inside]:
        add(path, line)
    for match in _GREP_LINE.finditer(text):
        if "." in match.group(1).rsplit("/", 1)[-1]:
            add(match.group(1), match.group(2))
    for match in _PATH.finditer(text):
        add(match.group(1), match.group(2))
    return found


def blank_long_runs(text: str) -> str:
    """`text` with every run of `LONG_RUN` or more path characters replaced by as many spaces (positions kept)."""
    return _LONG_RUN.sub(lambda match: " " * len(match.group()), text) if len(text) >= LONG_RUN else text


def line_ranges(text: str) -> list[tuple[int, int | None]]:
    """Line numbers and ranges named in prose: 'lines 100-150', 'line 42'."""
    return [(int(a), int(b) if b else None) for a, b in _LINES.findall(text)][-6:]


def backticked(text: str) -> list[str]:
    """Inline code spans, in order (commands, identifiers, paths quoted by the model)."""
    return _BACKTICK.findall(text)[:20]


def reasoning_part(text: str, command: str | None = None) -> str:
    """The reasoning before an answer's call: up to `<tool_call>`, or to the fence that opens `command`."""
    start = text.find(_CALL_OPEN)
    if start >= 0:
        return text[:start]
    if command:
        head = command.strip().split("\n", 1)[0][:60]
        at = text.rfind(head) if head else -1
        if at >= 0:
            fence = text.rfind("```", 0, at)
            return text[:fence] if fence >= 0 else text[:at]
    fence = text.rfind("```")
    if fence >= 0:
        opening = text.rfind("```", 0, fence)
        return text[:opening] if opening >= 0 else text[:fence]
    return text


@dataclass
class ReasoningFacts:
    """What streamed reasoning names: paths (with lines), line ranges, quoted commands and scripts."""

    text: str = ""
    paths: list[tuple[str, int | None]] = field(default_factory=list)
    ranges: list[tuple[int, int | None]] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    scripts: list[str] = field(default_factory=list)
    names: set[str] = field(default_factory=set)  # paths and their base names, for matching candidates
    symbols: list[str] = field(default_factory=list)  # quoted code (identifiers, `def f`), last first
    folders: list[str] = field(default_factory=list)  # quoted folder paths, last first

    @classmethod
    def of(cls, text: str, root: str = "") -> ReasoningFacts:
        """Pull the facts out of a reasoning text (once per text streamed)."""
        from harness.calls.canonical import canonical_bash

        paths = path_mentions(text, root, limit=24)[-8:]  # the last named matter most
        commands, scripts, symbols, folders = [], [], [], []
        original, text = text, blank_long_runs(text)
        quoted = [(m.start(), m.group(1)) for m in _BACKTICK.finditer(text)][-20:]  # the last ones matter most
        quoted += [(m.start(), m.group(1)) for m in _DQUOTED.finditer(text) if not _PATH.fullmatch(m.group(1))][-10:]
        for _, span in sorted(quoted):
            span = span.strip()
            if _SYMBOL.match(span) and not _PATH.fullmatch(span):
                if span not in _NOT_SYMBOLS:
                    symbols.append(span.removesuffix("()"))
            elif _FOLDER.match(span) and "/" in span and "." not in posixpath.basename(span.rstrip("/")):
                folders.append(norm_path(span, root))
            elif " " in span:
                if canonical_bash(span, root).kind != SHELL:
                    commands.append(span)
            if span.endswith((".py", ".sh")) and "/" not in span and " " not in span:
                scripts.append(span)
        names = {p for p, _ in paths} | {posixpath.basename(p) for p, _ in paths}
        symbols = list(dict.fromkeys(reversed(symbols)))[:4]
        folders += [norm_path(m.group(1), root) for m in _PLAIN_FOLDER.finditer(text)
                    if "://" not in text[m.start():m.end() + 3]]
        return cls(original, paths, line_ranges(text), commands[-4:], scripts[-3:], names, symbols,
                   [f for f in dict.fromkeys(reversed(folders)) if f][:3])
