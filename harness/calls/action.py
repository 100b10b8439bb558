"""Canonical actions: a call's tool, normalised arguments, kind, effect class and comparison key."""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from tools import TOOL_EFFECTS, Effect

# Kinds: what an action does, coarser than its key. SLOW_KINDS are the ones worth speculating early.
READ, VIEW, SEARCH, LIST, OUTLINE = "read", "view", "search", "list", "outline"
TEST, SCRIPT, WRITE_RUN = "test", "script", "write_run"
WRITE, EDIT, GIT, CLEANUP, INSTALL, SHELL, FINISH, OTHER = (
    "write", "edit", "git", "cleanup", "install", "shell", "finish", "other")
KINDS = (READ, VIEW, SEARCH, LIST, OUTLINE, TEST, SCRIPT, WRITE_RUN, WRITE, EDIT, GIT, CLEANUP, INSTALL,
         SHELL, FINISH, OTHER)
SLOW_KINDS = frozenset({TEST, SCRIPT})  # runs worth speculating; write_run also writes, so it is a write

# The kind of each Tao tool's calls, where its name does not say it (read_file and bash calls get theirs from
# their arguments); a tool's effect is its own (tools.TOOL_EFFECTS). Adding a tool: the tool, and a row here.
TOOL_KINDS = {"grep": SEARCH, "list_files": LIST, "outline": OUTLINE, "run_tests": TEST,
               "edit_file": EDIT, "write_file": WRITE, "finish": FINISH}


@dataclass(frozen=True, eq=False)
class Action:
    """A call in canonical form. Two actions are equal when their keys are."""

    tool: str
    args: dict[str, Any]
    kind: str
    effect: Effect
    key: str

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Action) and other.key == self.key

    def __hash__(self) -> int:
        return hash(self.key)

    @property
    def path(self) -> str | None:
        """The file or directory the action is about, when it has one."""
        value = self.args.get("path")
        return value if isinstance(value, str) else None


def make(tool: str, args: dict[str, Any], kind: str, effect: Effect | None = None) -> Action:
    """An action from already-normalised arguments (None values dropped)."""
    clean = {k: v for k, v in args.items() if v is not None}
    key = tool if tool == "finish" else f"{tool} {json.dumps(clean, sort_keys=True, ensure_ascii=False)}"
    return Action(tool, clean, kind, effect or TOOL_EFFECTS.get(tool, Effect.UNKNOWN), key)


@lru_cache(maxsize=8192)
def read_action(path: str, start: int | None = None, end: int | None = None) -> Action:
    """read_file in canonical form: a whole-file read has no range."""
    if start is not None and start <= 1 and end is None:
        start = None
    kind = READ if start is None and end is None else VIEW
    return make("read_file", {"path": path, "start_line": start, "end_line": end}, kind)


@lru_cache(maxsize=8192)
def grep_action(pattern: str, path: str | None = None) -> Action:
    """grep in canonical form (cached: candidates repeat from step to step)."""
    return make("grep", {"pattern": pattern, "path": path}, SEARCH)


@lru_cache(maxsize=4096)
def list_action(path: str | None) -> Action:
    """A one-level listing of `path` in canonical form."""
    return make("list_files", {"path": path, "depth": 1}, LIST)


def norm_path(path: Any, root: str = "") -> str:
    """A path relative to the workspace root, without `./`, doubled or trailing slashes; '' for the root."""
    if not isinstance(path, str):
        return ""
    path = path.strip()
    if not path:
        return ""
    path = posixpath.normpath(path)  # `/root/src/../a.py` is `/root/a.py` before it is compared with the root
    root = root.rstrip("/")
    if root and (path == root or path.startswith(root + "/")):
        path = path[len(root) + 1:]
    return "" if path in ("", ".") else path


def to_int(value: Any) -> int | None:
    """An int from a JSON value or string; None when it is not one."""
    try:
        return int(value) if value is not None and value != "" else None
    except (TypeError, ValueError, OverflowError):  # OverflowError: an infinite float
        return None


def changes_workspace(action: Action) -> bool:
    """Whether running the action may change files: mutating calls and scripts (which may write)."""
    return action.effect in (Effect.MUTATING, Effect.UNKNOWN) or action.kind in (SCRIPT, WRITE_RUN)
