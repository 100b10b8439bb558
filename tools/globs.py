"""Gitignore-style globs as ripgrep's `-g` applies them, so grep's Python fallback filters the same files.

A glob without a slash matches a name at any depth (`*.py`); one with a slash is anchored at the
workspace root (`src/*.py`); `**` spans folders; `{a,b}` are alternatives; a leading `!` excludes;
a trailing `/` matches folders only. As in ripgrep, a file matching an including glob is searched even
if it is hidden or ignored, a file not matching it is skipped, and folders are not filtered by it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import regex


@dataclass(frozen=True)
class GlobFilter:
    glob: str
    regex: Any  # a compiled `regex` pattern: matched with a timeout, as model-written globs can backtrack
    negated: bool
    dirs_only: bool

    @classmethod
    def parse(cls, glob: str) -> GlobFilter:
        negated = glob.startswith("!")
        body = glob[1:] if negated else glob
        dirs_only = body.endswith("/")
        body = body.rstrip("/")
        anchored = "/" in body
        body = body.lstrip("/")
        prefix = "" if anchored else "(?:.*/)?"
        return cls(glob, regex.compile(prefix + translate(body), regex.DOTALL), negated, dirs_only)

    def verdict(self, rel: str, is_dir: bool, timeout: float | None = None) -> bool | None:
        """True: search it whatever else says; False: skip it; None: the usual hidden/ignore rules decide.

        Past `timeout` seconds of matching, TimeoutError (a glob such as `**/**/**/...` can backtrack)."""
        matched = (is_dir or not self.dirs_only) and self.regex.fullmatch(rel, timeout=timeout) is not None
        if self.negated:
            return False if matched else None
        if matched:
            return True
        return None if is_dir else False


def translate(glob: str) -> str:
    """The regex body for one glob (no anchors): `*` and `?` stay within a folder name, `**` does not."""
    out: list[str] = []
    i = 0
    while i < len(glob):
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif glob.startswith("/**", i) and i + 3 == len(glob):
            out.append("/.*")
            i += 3
        elif glob.startswith("**", i):
            out.append(".*")
            i += 2
        else:
            piece, i = _translate_one(glob, i)
            out.append(piece)
    return "".join(out)


def _translate_one(glob: str, i: int) -> tuple[str, int]:
    char = glob[i]
    if char == "*":
        return "[^/]*", i + 1
    if char == "?":
        return "[^/]", i + 1
    if char == "\\" and i + 1 < len(glob):
        return re.escape(glob[i + 1]), i + 2
    if char == "[":
        return _char_class(glob, i)
    if char == "{":
        end = glob.find("}", i)
        if end != -1:
            alternatives = glob[i + 1:end].split(",")
            return "(?:" + "|".join(translate(alt) for alt in alternatives) + ")", end + 1
    return re.escape(char), i + 1


def _char_class(glob: str, i: int) -> tuple[str, int]:
    j = i + 1
    if j < len(glob) and glob[j] in "!^":
        j += 1
    if j < len(glob) and glob[j] == "]":
        j += 1
    end = glob.find("]", j)
    if end == -1:
        return re.escape("["), i + 1
    inner = glob[i + 1:end]
    if inner[:1] in ("!", "^"):
        inner = "^" + inner[1:]
    return "[" + inner.replace("\\", "\\\\").replace("[", "\\[") + "]", end + 1
