"""The user's past Tao sessions, newest first: what the analyzer adapts to before a new session starts.

    taken = model.adapt(past_sessions(state_dir() / "trajectories"), seconds=PAST_SECONDS)

The learned model comes from other agents' trajectories; the user's own sessions show Tao's tools and
the user's projects, which is what the next session will look like.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from harness.events import Event, ToolCall
from harness.traces import tao
from harness.traces.common import ImportReport

PAST_SESSIONS = 20  # the newest trajectories taken
PAST_SECONDS = 1.0  # at most this long at the start of a session (about 30 ms a 10-step session)


def past_sessions(directory: Path, limit: int = PAST_SESSIONS) -> Iterator[list[Event]]:
    """The events of the newest `limit` Tao trajectories under `directory` that made a call, newest first.

    Read lazily, so a caller that stops early reads no more; damaged lines and unreadable files are skipped."""
    if limit <= 0 or not directory.is_dir():
        return
    dated = []
    for path in directory.glob("*.jsonl"):
        try:
            dated.append((path.stat().st_mtime, path))
        except OSError:
            continue  # removed while we looked
    taken = 0
    for _, path in sorted(dated, reverse=True):
        for imported in tao.load(path, ImportReport()):
            if taken < limit and any(isinstance(event, ToolCall) for event in imported.events):
                taken += 1
                yield imported.events
        if taken >= limit:
            return
