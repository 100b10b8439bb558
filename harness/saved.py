"""A repository's saved sessions, each summed up in one line for choosing which to resume (`tao --resume`).

Only a trajectory's first line (its session_start) and its last few kilobytes are read, so that listing
many long sessions stays quick; how a session ended is its last event's, and a session whose last event is
no session_end was killed (or runs still, in another terminal).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from harness.history import saved_sessions
from harness.vocabulary import Status

PICK = "pick"  # what `--resume` without a file stands for in the TUI: choose among this repository's sessions
TAIL_BYTES = 16_384  # read from the end of a trajectory: enough for its last events but a huge observation
MAX_LISTED = 50


@dataclass(frozen=True)
class SavedSession:
    """One saved session, as the picker lists it."""

    path: Path
    modified: float  # the file's mtime: when the session last did something
    task: str  # the task's first line
    steps: int
    ended: str  # a Status: finished, limit, error, interrupted, or killed (no session_end after its last event)

    def when(self) -> str:
        return datetime.fromtimestamp(self.modified).strftime("%Y-%m-%d %H:%M")


def repository_sessions(folder: Path, repo: Path, limit: int = MAX_LISTED) -> list[SavedSession]:
    """The saved sessions that ran in `repo`, newest first; files that are no Tao trajectory are left out."""
    root = str(repo.resolve())
    found = []
    for path in saved_sessions(folder):
        summary = summarize(path)
        if summary is not None and summary[0] == root:
            found.append(summary[1])
            if len(found) >= limit:
                break
    return found


def summarize(path: Path) -> tuple[str, SavedSession] | None:
    """The repository a trajectory ran in and its summary; None when its first line is no session_start."""
    try:
        with path.open("rb") as handle:
            first = json.loads(handle.readline() or b"{}")
            size = os.fstat(handle.fileno()).st_size
            handle.seek(max(0, size - TAIL_BYTES))
            tail = handle.read().decode("utf-8", errors="replace")
            modified = os.fstat(handle.fileno()).st_mtime
    except (OSError, ValueError):
        return None
    if not isinstance(first, dict) or first.get("type") != "session_start" or not isinstance(first.get("repo"), str):
        return None
    events = [first, *_events(tail)]
    last = events[-1]
    steps = max((_int(e.get("steps")) or _int(e.get("step")) for e in events), default=0)
    ended = str(last.get("status")) if last.get("type") == "session_end" else Status.KILLED
    task = str(first.get("task") or "").strip().splitlines()
    return first["repo"], SavedSession(path, modified, task[0] if task else "(no task)", steps, ended)


def _events(tail: str) -> list[dict]:
    """The whole JSON objects among the tail's lines (the first may be cut; a torn last one is skipped)."""
    found = []
    for line in tail.splitlines():
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and isinstance(data.get("type"), str):
            found.append(data)
    return found


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
