"""`@path` mentions in the user's messages: the files they name are attached to what the model gets.

    expansion = expand("why does @calc/ops.py subtract?", repo)
    message = text + expansion.content      # the model sees the file; the user's text stays as typed

A word is a mention when it starts with `@` (not inside a word, so e-mail addresses are not) and names a
file of the repository, or looks like a path (it holds a `/` or a dot). Each file is attached once, cut at
MAX_FILE_CHARS (saying so); all of them together at MAX_TOTAL_CHARS. A mention of a file that does not
exist, of a directory, of a binary file or of a path outside the repository attaches nothing and says why,
to the user (`notes`) and to the model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

MAX_FILE_CHARS = 20_000
MAX_TOTAL_CHARS = 60_000
MENTION = re.compile(r"(?<![\w@])@([\w.~/+\-]+)")
TRAILING = ".,;:!?)]}'\""


@dataclass(frozen=True)
class Expansion:
    """What a message's mentions add to it."""

    content: str = ""  # appended to the message for the model; empty when nothing is mentioned
    files: list[str] = field(default_factory=list)  # attached, relative to the repository
    notes: list[str] = field(default_factory=list)  # for the user: what could not be attached, what was cut


def mentions(text: str) -> list[str]:
    """The paths mentioned in `text`, in order, each once (trailing punctuation left out)."""
    found: list[str] = []
    for match in MENTION.finditer(text):
        path = match.group(1).rstrip(TRAILING)
        if path and path not in found:
            found.append(path)
    return found


def expand(text: str, root: Path, max_file: int = MAX_FILE_CHARS, max_total: int = MAX_TOTAL_CHARS) -> Expansion:
    """The files `text` mentions, read from `root`, as text to append to the message."""
    root = root.resolve()
    blocks: list[str] = []
    files: list[str] = []
    notes: list[str] = []
    room = max_total
    for name in mentions(text):
        target = (root / name).resolve()
        if not target.exists() and "/" not in name and "." not in name.lstrip("."):
            continue  # `@property`, `@alice`: not meant as a file
        problem = _problem(name, target, root)
        if problem is None and room <= 0:
            problem = f"@{name} was not attached: the message already carries {max_total:,} characters of files"
        if problem is not None:
            notes.append(problem)
            blocks.append(f"({problem}.)")
            continue
        body = target.read_text(encoding="utf-8", errors="replace")
        cut = min(max_file, room)
        relative = target.relative_to(root).as_posix()
        if len(body) > cut:
            notes.append(f"@{relative} is {len(body):,} characters long; its first {cut:,} were attached")
            body = body[:cut] + f"\n[... cut: the file has {len(body):,} characters; read the rest with read_file]"
        room -= min(len(body), cut)
        files.append(relative)
        blocks.append(f'<file path="{relative}">\n{body}{"" if body.endswith(chr(10)) else chr(10)}</file>')
    if not blocks:
        return Expansion()
    return Expansion("\n\nFiles the user mentioned:\n" + "\n".join(blocks), files, notes)


def _problem(name: str, target: Path, root: Path) -> str | None:
    """Why `target` cannot be attached, in words for the user; None when it can."""
    if not target.is_relative_to(root):
        return f"@{name} is outside the repository {root}; only its files can be attached"
    if not target.exists():
        return f"@{name}: no such file in the repository {root}"
    if not target.is_file():
        return f"@{name} is a directory, not a file; mention the files in it one by one"
    with target.open("rb") as handle:
        if b"\0" in handle.read(8192):
            return f"@{name} is a binary file; it was not attached"
    return None
